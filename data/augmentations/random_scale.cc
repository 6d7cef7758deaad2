// "RandomScale": resizes by a factor drawn uniformly from [min_scale, max_scale], keeping the
// aspect ratio (up to rounding each side to whole pixels).
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/augmentation.h"
#include "core/status_macros.h"
#include "data/augmentations/augmentations.pb.h"
#include "data/augmentations/geometry.h"

namespace vision::data::augmentations {
namespace {

class RandomScale : public core::Augmentation {
 public:
  static absl::StatusOr<std::unique_ptr<RandomScale>> Create(const RandomScaleOptions& options) {
    if (!(options.min_scale() > 0 && options.min_scale() <= options.max_scale())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "RandomScaleOptions: need 0 < min_scale <= max_scale, got min_scale ",
          options.min_scale(), ", max_scale ", options.max_scale()));
    }
    return std::unique_ptr<RandomScale>(new RandomScale(options));
  }

  absl::Status Apply(core::Sample* sample, std::mt19937_64& rng) const override {
    VISION_RETURN_IF_ERROR(CheckHasImage(*sample));
    const double scale =
        std::uniform_real_distribution<double>(options_.min_scale(), options_.max_scale())(rng);
    const cv::Size size = sample->image.size();
    const cv::Size scaled(std::max(1, static_cast<int>(std::lround(size.width * scale))),
                          std::max(1, static_cast<int>(std::lround(size.height * scale))));
    return ResizeSample(scaled, sample);
  }

 private:
  explicit RandomScale(const RandomScaleOptions& options) : options_(options) {}

  const RandomScaleOptions options_;
};

VISION_REGISTER_PLUGIN(core::AugmentationRegistry, "RandomScale", RandomScale,
                       RandomScaleOptions);

}  // namespace
}  // namespace vision::data::augmentations
