// "PadToDivisor": pads bottom and right so both sides are multiples of `divisor`, as strided
// backbones need; the origin stays, so annotations and scale factors do not change. The size
// before padding is kept in Sample::size_before_padding (Batch::image_sizes). Listed after
// Normalize, it pads with 0, the mean colour, as torchvision's batch_images does.
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

class PadToDivisor : public core::Augmentation {
 public:
  static absl::StatusOr<std::unique_ptr<PadToDivisor>> Create(
      const PadToDivisorOptions& options) {
    if (options.divisor() < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "PadToDivisorOptions.divisor: must be >= 1, got ", options.divisor()));
    }
    VISION_ASSIGN_OR_RETURN(const cv::Scalar fill,
                            FillFromValues(options.image_fill(), "PadToDivisorOptions.image_fill"));
    return std::unique_ptr<PadToDivisor>(new PadToDivisor(options.divisor(), fill));
  }

  absl::Status Apply(core::Sample* sample, std::mt19937_64& rng) const override {
    VISION_RETURN_IF_ERROR(CheckHasImage(*sample));
    auto round_up = [this](int side) { return (side + divisor_ - 1) / divisor_ * divisor_; };
    const cv::Size padded(round_up(sample->image.cols), round_up(sample->image.rows));
    if (padded == sample->image.size()) return absl::OkStatus();
    const cv::Size before = sample->size_before_padding.empty() ? sample->image.size()
                                                                : sample->size_before_padding;
    WarpParams params;
    params.image_fill = fill_;
    VISION_RETURN_IF_ERROR(WarpSample(cv::Matx23d(1, 0, 0, 0, 1, 0), padded, params, sample));
    sample->size_before_padding = before;
    return absl::OkStatus();
  }

 private:
  PadToDivisor(int divisor, cv::Scalar fill) : divisor_(divisor), fill_(fill) {}

  const int divisor_;
  const cv::Scalar fill_;
};

VISION_REGISTER_PLUGIN(core::AugmentationRegistry, "PadToDivisor", PadToDivisor,
                       PadToDivisorOptions);

}  // namespace
}  // namespace vision::data::augmentations
