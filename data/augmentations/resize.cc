// "Resize": to a target size by shorter side, longer side, fit-into-box (all keeping the aspect
// ratio) or exactly; optionally rounding each side to a multiple (DBNet's evaluation resize).
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

class Resize : public core::Augmentation {
 public:
  static absl::StatusOr<std::unique_ptr<Resize>> Create(const ResizeOptions& options) {
    const bool by_side = options.mode() == ResizeOptions::SHORTER_SIDE ||
                         options.mode() == ResizeOptions::LONGER_SIDE;
    for (int32_t choice : options.size_choices()) {
      if (!by_side || choice <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ResizeOptions.size_choices: need sizes > 0 with mode SHORTER_SIDE or LONGER_SIDE, "
            "got ", choice, " with mode ", ResizeOptions::Mode_Name(options.mode())));
      }
    }
    if (by_side && options.size_choices_size() == 0 && options.size() <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("ResizeOptions.size: must be > 0 for mode ",
                       ResizeOptions::Mode_Name(options.mode()), ", got ", options.size()));
    }
    if (!by_side && (options.width() <= 0 || options.height() <= 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ResizeOptions.width/height: must both be > 0 for mode ",
          ResizeOptions::Mode_Name(options.mode()), ", got ", options.width(), "x",
          options.height()));
    }
    if (options.max_size() < 0 || options.round_to_multiple() < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ResizeOptions: need max_size >= 0 and round_to_multiple >= 1, got ",
          options.max_size(), " and ", options.round_to_multiple()));
    }
    return std::unique_ptr<Resize>(new Resize(options));
  }

  absl::Status Apply(core::Sample* sample, std::mt19937_64& rng) const override {
    VISION_RETURN_IF_ERROR(CheckHasImage(*sample));
    int size = options_.size();
    if (options_.size_choices_size() > 0) {
      size = options_.size_choices(std::uniform_int_distribution<int>(
          0, options_.size_choices_size() - 1)(rng));
    }
    return ResizeSample(TargetSize(sample->image.size(), size), sample);
  }

 private:
  explicit Resize(const ResizeOptions& options) : options_(options) {}

  cv::Size TargetSize(cv::Size size, int side) const {
    const double w = size.width, h = size.height;
    double scale = 1;
    switch (options_.mode()) {
      case ResizeOptions::SHORTER_SIDE:
        // torchvision's min(min_size / shorter, max_size / longer), the same double arithmetic.
        scale = side / std::min(w, h);
        if (options_.max_size() > 0) {
          scale = std::min(scale, options_.max_size() / std::max(w, h));
        }
        break;
      case ResizeOptions::LONGER_SIDE:
        scale = side / std::max(w, h);
        break;
      case ResizeOptions::FIT:
        scale = std::min(options_.width() / w, options_.height() / h);
        break;
      case ResizeOptions::EXACT:
        return Rounded(options_.width(), options_.height());
    }
    return Rounded(w * scale, h * scale);
  }

  cv::Size Rounded(double w, double h) const {
    const int m = options_.round_to_multiple();
    const bool floor = options_.rounding() == ResizeOptions::FLOOR;
    auto round = [m, floor](double side) {
      const double multiples = side / m;
      return std::max(m, static_cast<int>(floor ? std::floor(multiples)
                                                : static_cast<double>(std::lround(multiples))) *
                             m);
    };
    return cv::Size(round(w), round(h));
  }

  const ResizeOptions options_;
};

VISION_REGISTER_PLUGIN(core::AugmentationRegistry, "Resize", Resize, ResizeOptions);

}  // namespace
}  // namespace vision::data::augmentations
