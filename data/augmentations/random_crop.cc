// "RandomCrop": a fixed-size window that avoids cutting instances (random_crop.h), padded at the
// bottom/right when the image is smaller; annotations leaving the window are clipped
// (geometry.h). Scale factors stay: a crop moves the origin but does not resize. With
// min_side_ratio > 0, MhLiao/DB's crop instead: a window of random size resized to fit.
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

cv::Point ChooseCropOrigin(cv::Size image, cv::Size window, const std::vector<CropExtent>& extents,
                           int max_tries, std::mt19937_64& rng) {
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

// A free position of `axis` (positions no wanted extent blocks) per the reference's draw: two
// runs (with replacement) when more than one run is kept, else two positions of the whole axis.
std::pair<int, int> DrawEdges(const std::vector<int>& axis,
                              const std::vector<std::pair<size_t, size_t>>& runs, int size,
                              std::mt19937_64& rng) {
  int a, b;
  if (runs.size() > 1) {
    std::uniform_int_distribution<size_t> pick_run(0, runs.size() - 1);
    auto from = [&](const std::pair<size_t, size_t>& run) {
      return axis[std::uniform_int_distribution<size_t>(run.first, run.second - 1)(rng)];
    };
    const size_t first = pick_run(rng);
    const size_t second = pick_run(rng);
    a = from(runs[first]);
    b = from(runs[second]);
  } else {
    std::uniform_int_distribution<size_t> pick(0, axis.size() - 1);
    a = axis[pick(rng)];
    b = axis[pick(rng)];
  }
  return {std::clamp(std::min(a, b), 0, size - 1), std::clamp(std::max(a, b), 0, size - 1)};
}

// The free positions of an axis of `size` and their runs, [begin, end) indices into the
// positions, all but the last run (the reference's split_regions never appends it).
void FreePositions(int size, const std::vector<std::pair<double, double>>& spans,
                   std::vector<int>* axis, std::vector<std::pair<size_t, size_t>>* runs) {
  std::vector<bool> blocked(size, false);
  for (const auto& [begin, end] : spans) {
    const int first = std::max(0, static_cast<int>(std::nearbyint(begin)));
    const int last = std::min(size, static_cast<int>(std::nearbyint(end)));
    for (int i = first; i < last; ++i) blocked[i] = true;
  }
  axis->clear();
  runs->clear();
  for (int i = 0; i < size; ++i) {
    if (!blocked[i]) axis->push_back(i);
  }
  size_t run_begin = 0;
  for (size_t i = 1; i < axis->size(); ++i) {
    if ((*axis)[i] != (*axis)[i - 1] + 1) {
      runs->emplace_back(run_begin, i);
      run_begin = i;
    }
  }
}

}  // namespace

cv::Rect ChooseScaledCropWindow(cv::Size image, const std::vector<CropExtent>& extents,
                                float min_side_ratio, int max_tries, std::mt19937_64& rng) {
  const cv::Rect whole(0, 0, image.width, image.height);
  std::vector<std::pair<double, double>> x_spans, y_spans;
  std::vector<cv::Rect2f> wanted;
  for (const CropExtent& e : extents) {
    if (!e.wanted) continue;
    wanted.push_back(e.box);
    x_spans.emplace_back(e.box.x, static_cast<double>(e.box.x) + e.box.width);
    y_spans.emplace_back(e.box.y, static_cast<double>(e.box.y) + e.box.height);
  }
  std::vector<int> x_axis, y_axis;
  std::vector<std::pair<size_t, size_t>> x_runs, y_runs;
  FreePositions(image.width, x_spans, &x_axis, &x_runs);
  FreePositions(image.height, y_spans, &y_axis, &y_runs);
  if (x_axis.empty() || y_axis.empty()) return whole;
  for (int attempt = 0; attempt < max_tries; ++attempt) {
    const auto [x_min, x_max] = DrawEdges(x_axis, x_runs, image.width, rng);
    const auto [y_min, y_max] = DrawEdges(y_axis, y_runs, image.height, rng);
    if (x_max - x_min < min_side_ratio * image.width ||
        y_max - y_min < min_side_ratio * image.height) {
      continue;
    }
    for (const cv::Rect2f& box : wanted) {
      const bool outside =
          box.x + box.width < x_min || box.x > x_max || box.y + box.height < y_min || box.y > y_max;
      if (!outside) return cv::Rect(x_min, y_min, x_max - x_min, y_max - y_min);
    }
  }
  return whole;
}

namespace {

class RandomCrop : public core::Augmentation {
 public:
  static absl::StatusOr<std::unique_ptr<RandomCrop>> Create(const RandomCropOptions& options) {
    if (options.width() <= 0 || options.height() <= 0 || options.max_tries() < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("RandomCropOptions: need width, height > 0 and max_tries >= 1, got ",
                       options.width(), "x", options.height(), " and ", options.max_tries()));
    }
    if (!(options.min_side_ratio() >= 0 && options.min_side_ratio() <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "RandomCropOptions.min_side_ratio: must be in [0, 1] (0: a fixed width x height "
          "window; DBNet's reference uses 0.1), got ",
          options.min_side_ratio()));
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
    if (options_.min_side_ratio() > 0) return ApplyScaled(sample, rng);
    const cv::Size image = sample->image.size();
    const cv::Size window(std::min(options_.width(), image.width),
                          std::min(options_.height(), image.height));
    const cv::Point origin =
        ChooseCropOrigin(image, window, CropExtents(*sample), options_.max_tries(), rng);
    return WarpSample(cv::Matx23d(1, 0, -origin.x, 0, 1, -origin.y),
                      cv::Size(options_.width(), options_.height()), params_, sample);
  }

 private:
  // MhLiao/DB's RandomCropData: the window, resized to fit width x height keeping its aspect
  // ratio (cv::resize, as cv2.resize), padded at the bottom and right. Each step is one warp:
  // a crop and a pad copy pixels exactly; the resize scales each side by its integer size's
  // ratio, as cv2.resize does (the reference scales the polygons by the unrounded factor, at
  // most a pixel apart), and updates the sample's scale factors.
  absl::Status ApplyScaled(core::Sample* sample, std::mt19937_64& rng) const {
    const cv::Rect window =
        ChooseScaledCropWindow(sample->image.size(), CropExtents(*sample),
                               options_.min_side_ratio(), options_.max_tries(), rng);
    VISION_RETURN_IF_ERROR(
        WarpSample(cv::Matx23d(1, 0, -window.x, 0, 1, -window.y), window.size(), params_, sample));
    const double scale = std::min(static_cast<double>(options_.width()) / window.width,
                                  static_cast<double>(options_.height()) / window.height);
    const cv::Size fitted(std::max(1, static_cast<int>(window.width * scale)),
                          std::max(1, static_cast<int>(window.height * scale)));
    if (fitted != window.size()) VISION_RETURN_IF_ERROR(ResizeSample(fitted, sample));
    return WarpSample(cv::Matx23d(1, 0, 0, 0, 1, 0), cv::Size(options_.width(), options_.height()),
                      params_, sample);
  }

  RandomCrop(const RandomCropOptions& options, const WarpParams& params)
      : options_(options), params_(params) {}

  const RandomCropOptions options_;
  const WarpParams params_;
};

VISION_REGISTER_PLUGIN(core::AugmentationRegistry, "RandomCrop", RandomCrop, RandomCropOptions);

}  // namespace
}  // namespace vision::data::augmentations
