// "Normalize": BGR uint8 -> float32 RGB, (pixel / max_pixel_value - mean) / std per channel, as
// torchvision's ToTensor + Normalize. Geometric augmentations after it pad with 0, which is the
// mean colour in normalised units.
#include <memory>
#include <random>

#include <opencv2/imgproc.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/augmentation.h"
#include "core/status_macros.h"
#include "data/augmentations/augmentations.pb.h"
#include "data/augmentations/geometry.h"

namespace vision::data::augmentations {
namespace {

class Normalize : public core::Augmentation {
 public:
  static absl::StatusOr<std::unique_ptr<Normalize>> Create(const NormalizeOptions& options) {
    cv::Vec3d mean(0.485, 0.456, 0.406), std(0.229, 0.224, 0.225);
    if (!options.mean().empty()) {
      if (options.mean_size() != 3) {
        return absl::InvalidArgumentError(absl::StrCat(
            "NormalizeOptions.mean: needs 3 values (R, G, B), got ", options.mean_size()));
      }
      for (int c = 0; c < 3; ++c) mean[c] = options.mean(c);
    }
    if (!options.std().empty()) {
      if (options.std_size() != 3) {
        return absl::InvalidArgumentError(absl::StrCat(
            "NormalizeOptions.std: needs 3 values (R, G, B), got ", options.std_size()));
      }
      for (int c = 0; c < 3; ++c) std[c] = options.std(c);
    }
    for (int c = 0; c < 3; ++c) {
      if (!(std[c] > 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("NormalizeOptions.std: every value must be > 0, got ", std[c]));
      }
    }
    if (!(options.max_pixel_value() > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "NormalizeOptions.max_pixel_value: must be > 0, got ", options.max_pixel_value()));
    }
    // out = pixel * gain - offset, per RGB channel.
    cv::Scalar gain, offset;
    for (int c = 0; c < 3; ++c) {
      gain[c] = 1.0 / (options.max_pixel_value() * std[c]);
      offset[c] = mean[c] / std[c];
    }
    return std::unique_ptr<Normalize>(new Normalize(gain, offset));
  }

  absl::Status Apply(core::Sample* sample, std::mt19937_64& rng) const override {
    VISION_RETURN_IF_ERROR(CheckHasImage(*sample));
    if (sample->image.type() != CV_8UC3) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sample '", sample->id, "': Normalize needs an 8-bit 3-channel BGR image, got type ",
          sample->image.type(), "; is Normalize listed twice?"));
    }
    cv::Mat rgb;
    cv::cvtColor(sample->image, rgb, cv::COLOR_BGR2RGB);
    cv::Mat normalized;
    rgb.convertTo(normalized, CV_32F);
    cv::multiply(normalized, gain_, normalized);
    cv::subtract(normalized, offset_, normalized);
    sample->image = normalized;
    return absl::OkStatus();
  }

 private:
  Normalize(cv::Scalar gain, cv::Scalar offset) : gain_(gain), offset_(offset) {}

  const cv::Scalar gain_;
  const cv::Scalar offset_;
};

VISION_REGISTER_PLUGIN(core::AugmentationRegistry, "Normalize", Normalize, NormalizeOptions);

}  // namespace
}  // namespace vision::data::augmentations
