// "RandomRotate": rotates about the image centre by an angle drawn uniformly from
// [min_angle, max_angle] degrees (positive = counter-clockwise as displayed, as
// cv::getRotationMatrix2D), on a canvas that keeps its size or grows to hold the whole image.
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

class RandomRotate : public core::Augmentation {
 public:
  static absl::StatusOr<std::unique_ptr<RandomRotate>> Create(
      const RandomRotateOptions& options) {
    if (!(options.min_angle() <= options.max_angle())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "RandomRotateOptions: need min_angle <= max_angle, got ", options.min_angle(), " and ",
          options.max_angle()));
    }
    VISION_ASSIGN_OR_RETURN(const cv::Scalar fill,
                            FillFromValues(options.image_fill(), "RandomRotateOptions.image_fill"));
    WarpParams params;
    params.image_fill = fill;
    params.clip = ClipRulesFromProto(options.clip());
    return std::unique_ptr<RandomRotate>(new RandomRotate(options, params));
  }

  absl::Status Apply(core::Sample* sample, std::mt19937_64& rng) const override {
    VISION_RETURN_IF_ERROR(CheckHasImage(*sample));
    const double degrees =
        std::uniform_real_distribution<double>(options_.min_angle(), options_.max_angle())(rng);
    const double radians = degrees * CV_PI / 180.0;
    const double c = std::cos(radians), s = std::sin(radians);
    const double w = sample->image.cols, h = sample->image.rows;
    cv::Size out_size = sample->image.size();
    if (options_.expand()) {
      // Ceil with a tolerance so 90-degree turns do not gain a pixel from rounding noise.
      out_size = cv::Size(static_cast<int>(std::ceil(std::abs(c) * w + std::abs(s) * h - 1e-6)),
                          static_cast<int>(std::ceil(std::abs(s) * w + std::abs(c) * h - 1e-6)));
    }
    // Rotation about the input centre, then that centre moved to the output centre.
    const double cx = w / 2, cy = h / 2;
    const cv::Matx23d m(c, s, out_size.width / 2.0 - c * cx - s * cy,  //
                        -s, c, out_size.height / 2.0 + s * cx - c * cy);
    return WarpSample(m, out_size, params_, sample);
  }

 private:
  RandomRotate(const RandomRotateOptions& options, const WarpParams& params)
      : options_(options), params_(params) {}

  const RandomRotateOptions options_;
  const WarpParams params_;
};

VISION_REGISTER_PLUGIN(core::AugmentationRegistry, "RandomRotate", RandomRotate,
                       RandomRotateOptions);

}  // namespace
}  // namespace vision::data::augmentations
