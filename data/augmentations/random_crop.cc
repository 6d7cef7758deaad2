// "RandomCrop": a fixed-size window that avoids cutting instances (random_crop.h), padded at the
// bottom/right when the image is smaller; annotations leaving the window are clipped
// (geometry.h). Scale factors stay: a crop moves the origin but does not resize.
#include "data/augmentations/random_crop.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/augmentation.h"
#include "core/polygon.h"
#include "core/status_macros.h"
#include "data/augmentations/augmentations.pb.h"
#include "data/augmentations/geometry.h"

namespace vision::data::augmentations {
namespace {

// Window positions in [0, image - window] whose two edges cut no extent's projection
// [begin, end); empty when there is none.
std::vector<int> GapPositions(int image, int window,
                              const std::vector<std::pair<float, float>>& spans) {
  // blocked[i]: the line at coordinate i passes through the inside of some span.
  std::vector<bool> blocked(image + 1, false);
  for (const auto& [begin, end] : spans) {
    const int first = std::max(0, static_cast<int>(std::floor(begin)) + 1);
    const int last = std::min(image, static_cast<int>(std::ceil(end)) - 1);
    for (int i = first; i <= last; ++i) blocked[i] = true;
  }
  std::vector<int> positions;
  for (int p = 0; p + window <= image; ++p) {
    if (!blocked[p] && !blocked[p + window]) positions.push_back(p);
  }
  return positions;
}

int DrawPosition(const std::vector<int>& gaps, int image, int window, std::mt19937_64& rng) {
  if (gaps.empty()) return std::uniform_int_distribution<int>(0, image - window)(rng);
  return gaps[std::uniform_int_distribution<size_t>(0, gaps.size() - 1)(rng)];
}

}  // namespace

std::vector<CropExtent> CropExtents(const core::Sample& sample) {
  std::vector<CropExtent> extents;
  for (const core::TextInstance& text : sample.texts) {
    if (text.polygon.empty()) continue;
    extents.push_back({core::PolygonBounds(text.polygon), !text.ignore});
  }
  for (const core::ObjectInstance& object : sample.objects) {
    extents.push_back({object.box, !object.is_crowd});
  }
  return extents;
}

cv::Point ChooseCropOrigin(cv::Size image, cv::Size window,
                           const std::vector<CropExtent>& extents, int max_tries,
                           std::mt19937_64& rng) {
  std::vector<std::pair<float, float>> x_spans, y_spans;
  bool any_wanted = false;
  for (const CropExtent& e : extents) {
    x_spans.emplace_back(e.box.x, e.box.x + e.box.width);
    y_spans.emplace_back(e.box.y, e.box.y + e.box.height);
    any_wanted |= e.wanted;
  }
  const std::vector<int> x_gaps = GapPositions(image.width, window.width, x_spans);
  const std::vector<int> y_gaps = GapPositions(image.height, window.height, y_spans);

  cv::Point best;
  // Lexicographic: fewer cuts, then holding a wanted instance.
  std::pair<int, int> best_score{std::numeric_limits<int>::min(), 0};
  for (int attempt = 0; attempt < std::max(1, max_tries); ++attempt) {
    const cv::Point origin(DrawPosition(x_gaps, image.width, window.width, rng),
                           DrawPosition(y_gaps, image.height, window.height, rng));
    const cv::Rect2f rect(static_cast<float>(origin.x), static_cast<float>(origin.y),
                          static_cast<float>(window.width), static_cast<float>(window.height));
    int cuts = 0;
    bool holds_wanted = false;
    for (const CropExtent& e : extents) {
      const bool overlaps = e.box.x < rect.x + rect.width && e.box.x + e.box.width > rect.x &&
                            e.box.y < rect.y + rect.height && e.box.y + e.box.height > rect.y;
      const bool inside = e.box.x >= rect.x && e.box.y >= rect.y &&
                          e.box.x + e.box.width <= rect.x + rect.width &&
                          e.box.y + e.box.height <= rect.y + rect.height;
      if (overlaps && !inside) ++cuts;
      holds_wanted |= inside && e.wanted;
    }
    const std::pair<int, int> score{-cuts, holds_wanted ? 1 : 0};
    if (score > best_score) {
      best = origin;
      best_score = score;
    }
    if (cuts == 0 && (holds_wanted || !any_wanted)) break;
  }
  return best;
}

namespace {

class RandomCrop : public core::Augmentation {
 public:
  static absl::StatusOr<std::unique_ptr<RandomCrop>> Create(const RandomCropOptions& options) {
    if (options.width() <= 0 || options.height() <= 0 || options.max_tries() < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "RandomCropOptions: need width, height > 0 and max_tries >= 1, got ", options.width(),
          "x", options.height(), " and ", options.max_tries()));
    }
    VISION_ASSIGN_OR_RETURN(const cv::Scalar fill,
                            FillFromValues(options.image_fill(), "RandomCropOptions.image_fill"));
    WarpParams params;
    params.image_fill = fill;
    params.clip = ClipRulesFromProto(options.clip());
    return std::unique_ptr<RandomCrop>(new RandomCrop(options, params));
  }

  absl::Status Apply(core::Sample* sample, std::mt19937_64& rng) const override {
    VISION_RETURN_IF_ERROR(CheckHasImage(*sample));
    const cv::Size image = sample->image.size();
    const cv::Size window(std::min(options_.width(), image.width),
                          std::min(options_.height(), image.height));
    const cv::Point origin =
        ChooseCropOrigin(image, window, CropExtents(*sample), options_.max_tries(), rng);
    return WarpSample(cv::Matx23d(1, 0, -origin.x, 0, 1, -origin.y),
                      cv::Size(options_.width(), options_.height()), params_, sample);
  }

 private:
  RandomCrop(const RandomCropOptions& options, const WarpParams& params)
      : options_(options), params_(params) {}

  const RandomCropOptions options_;
  const WarpParams params_;
};

VISION_REGISTER_PLUGIN(core::AugmentationRegistry, "RandomCrop", RandomCrop, RandomCropOptions);

}  // namespace
}  // namespace vision::data::augmentations
