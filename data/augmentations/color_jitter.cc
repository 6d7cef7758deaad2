// "ColorJitter": torchvision.transforms.ColorJitter on a BGR uint8 image. The image is processed
// in float and rounded once at the end (torchvision rounds after every step on uint8 tensors,
// so results may differ from it by a grey level). Annotations are untouched.
#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <numeric>
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

void Clamp(cv::Mat* image) {
  cv::min(*image, 255.0, *image);
  cv::max(*image, 0.0, *image);
}

cv::Mat Gray(const cv::Mat& bgr) {
  cv::Mat gray;
  cv::cvtColor(bgr, gray, cv::COLOR_BGR2GRAY);
  return gray;
}

// Blends with the grey image's mean, as torchvision's adjust_contrast.
void AdjustContrast(double factor, cv::Mat* image) {
  const double mean = cv::mean(Gray(*image))[0];
  image->convertTo(*image, -1, factor, (1 - factor) * mean);
  Clamp(image);
}

// Blends with the per-pixel grey image, as torchvision's adjust_saturation.
void AdjustSaturation(double factor, cv::Mat* image) {
  cv::Mat gray;
  cv::cvtColor(Gray(*image), gray, cv::COLOR_GRAY2BGR);
  cv::addWeighted(*image, factor, gray, 1 - factor, 0, *image);
  Clamp(image);
}

// Rotates the hue by `shift` of a full turn, as torchvision's adjust_hue.
void AdjustHue(double shift, cv::Mat* image) {
  cv::Mat hsv;
  cv::cvtColor(*image / 255.0, hsv, cv::COLOR_BGR2HSV);  // float: H in [0, 360)
  for (int r = 0; r < hsv.rows; ++r) {
    auto* row = hsv.ptr<cv::Vec3f>(r);
    for (int c = 0; c < hsv.cols; ++c) {
      const double h = row[c][0] + shift * 360.0;
      row[c][0] = static_cast<float>(h - 360.0 * std::floor(h / 360.0));
    }
  }
  cv::cvtColor(hsv, *image, cv::COLOR_HSV2BGR);
  *image *= 255.0;
  Clamp(image);
}

class ColorJitter : public core::Augmentation {
 public:
  static absl::StatusOr<std::unique_ptr<ColorJitter>> Create(const ColorJitterOptions& options) {
    if (options.brightness() < 0 || options.contrast() < 0 || options.saturation() < 0 ||
        options.hue() < 0 || options.hue() > 0.5) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ColorJitterOptions: brightness, contrast and saturation must be >= 0 and hue in "
          "[0, 0.5], got ",
          options.brightness(), ", ", options.contrast(), ", ", options.saturation(), ", ",
          options.hue()));
    }
    return std::unique_ptr<ColorJitter>(new ColorJitter(options));
  }

  absl::Status Apply(core::Sample* sample, std::mt19937_64& rng) const override {
    VISION_RETURN_IF_ERROR(CheckHasImage(*sample));
    if (sample->image.type() != CV_8UC3) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sample '", sample->id, "': ColorJitter needs an 8-bit 3-channel BGR image, got type ",
          sample->image.type(), "; put it before Normalize"));
    }
    if (options_.brightness() == 0 && options_.contrast() == 0 && options_.saturation() == 0 &&
        options_.hue() == 0) {
      return absl::OkStatus();
    }
    // As torchvision: a random order, then one factor per enabled component.
    std::array<int, 4> order;
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    auto factor = [&rng](double range) {
      return std::uniform_real_distribution<double>(std::max(0.0, 1 - range), 1 + range)(rng);
    };
    const double brightness = options_.brightness() > 0 ? factor(options_.brightness()) : 1;
    const double contrast = options_.contrast() > 0 ? factor(options_.contrast()) : 1;
    const double saturation = options_.saturation() > 0 ? factor(options_.saturation()) : 1;
    const double hue =
        options_.hue() > 0
            ? std::uniform_real_distribution<double>(-options_.hue(), options_.hue())(rng)
            : 0;
    cv::Mat image;
    sample->image.convertTo(image, CV_32F);
    for (int op : order) {
      switch (op) {
        case 0:
          if (options_.brightness() > 0) {
            image *= brightness;
            Clamp(&image);
          }
          break;
        case 1:
          if (options_.contrast() > 0) AdjustContrast(contrast, &image);
          break;
        case 2:
          if (options_.saturation() > 0) AdjustSaturation(saturation, &image);
          break;
        case 3:
          if (options_.hue() > 0) AdjustHue(hue, &image);
          break;
      }
    }
    image.convertTo(sample->image, CV_8U);
    return absl::OkStatus();
  }

 private:
  explicit ColorJitter(const ColorJitterOptions& options) : options_(options) {}

  const ColorJitterOptions options_;
};

VISION_REGISTER_PLUGIN(core::AugmentationRegistry, "ColorJitter", ColorJitter,
                       ColorJitterOptions);

}  // namespace
}  // namespace vision::data::augmentations
