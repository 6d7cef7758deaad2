// "HorizontalFlip": mirrors left-right with a probability. Polygon points are re-ordered so they
// keep their orientation and a TL, TR, BR, BL quad still starts at its top-left (geometry.h).
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

class HorizontalFlip : public core::Augmentation {
 public:
  static absl::StatusOr<std::unique_ptr<HorizontalFlip>> Create(
      const HorizontalFlipOptions& options) {
    if (!(options.probability() >= 0 && options.probability() <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "HorizontalFlipOptions.probability: must be in [0, 1], got ", options.probability()));
    }
    return std::unique_ptr<HorizontalFlip>(new HorizontalFlip(options.probability()));
  }

  absl::Status Apply(core::Sample* sample, std::mt19937_64& rng) const override {
    VISION_RETURN_IF_ERROR(CheckHasImage(*sample));
    if (!(std::uniform_real_distribution<double>(0, 1)(rng) < probability_)) {
      return absl::OkStatus();
    }
    const double width = sample->image.cols;
    return WarpSample(cv::Matx23d(-1, 0, width, 0, 1, 0), sample->image.size(), WarpParams(),
                      sample);
  }

 private:
  explicit HorizontalFlip(double probability) : probability_(probability) {}

  const double probability_;
};

VISION_REGISTER_PLUGIN(core::AugmentationRegistry, "HorizontalFlip", HorizontalFlip,
                       HorizontalFlipOptions);

}  // namespace
}  // namespace vision::data::augmentations
