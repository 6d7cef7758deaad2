#include "models/dbnet/post_processor.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <vector>

#include <opencv2/imgproc.hpp>

#include "core/polygon.h"
#include "models/dbnet/geometry.h"

namespace vision::models::dbnet {
namespace {

// Mean probability inside `polygon`, over its bounding box with a filled mask so that the
// cost is proportional to the region, not to the image.
double MeanInside(const cv::Mat& probability, const std::vector<cv::Point>& polygon) {
  const cv::Rect box =
      cv::boundingRect(polygon) & cv::Rect(0, 0, probability.cols, probability.rows);
  if (box.empty()) return 0.0;
  cv::Mat mask(box.size(), CV_8U, cv::Scalar(0));
  std::vector<std::vector<cv::Point>> shifted(1);
  shifted[0].reserve(polygon.size());
  for (const cv::Point& p : polygon) shifted[0].push_back(p - box.tl());
  cv::fillPoly(mask, shifted, cv::Scalar(1));
  return cv::mean(probability(box), mask)[0];
}

// The rectangle's corners clockwise from the top-left, as MhLiao/DB's get_mini_boxes.
core::Polygon OrderedCorners(const cv::RotatedRect& rect) {
  std::array<cv::Point2f, 4> p;
  rect.points(p.data());
  std::sort(p.begin(), p.end(),
            [](const cv::Point2f& a, const cv::Point2f& b) { return a.x < b.x; });
  const auto [top_left, bottom_left] =
      p[0].y <= p[1].y ? std::pair(p[0], p[1]) : std::pair(p[1], p[0]);
  const auto [top_right, bottom_right] =
      p[2].y <= p[3].y ? std::pair(p[2], p[3]) : std::pair(p[3], p[2]);
  return {top_left, top_right, bottom_right, bottom_left};
}

float ShorterSide(const cv::RotatedRect& rect) {
  return std::min(rect.size.width, rect.size.height);
}

}  // namespace

std::vector<core::TextInstance> ExtractTextRegions(const cv::Mat& probability,
                                                   const PostProcessorOptions& options,
                                                   double scale_x, double scale_y,
                                                   int original_width, int original_height) {
  CV_Assert(probability.type() == CV_32F && probability.dims == 2);
  cv::Mat bitmap = probability > options.binary_threshold;
  std::vector<std::vector<cv::Point>> contours;
  cv::findContours(bitmap, contours, cv::RETR_LIST, cv::CHAIN_APPROX_SIMPLE);

  const float max_x = static_cast<float>(original_width - 1);
  const float max_y = static_cast<float>(original_height - 1);
  std::vector<core::TextInstance> regions;
  const size_t candidates =
      std::min(contours.size(), static_cast<size_t>(std::max(options.max_candidates, 0)));
  std::vector<cv::Point> approx;
  for (size_t c = 0; c < candidates; ++c) {
    const std::vector<cv::Point>& contour = contours[c];
    cv::approxPolyDP(contour, approx, 0.01 * cv::arcLength(contour, /*closed=*/true),
                     /*closed=*/true);
    if (approx.size() < 4) continue;
    if (ShorterSide(cv::minAreaRect(approx)) < options.min_box_size) continue;
    const double score = MeanInside(probability, approx);
    if (score < options.box_threshold) continue;

    const core::Polygon shrunk(approx.begin(), approx.end());
    const double perimeter = PolygonPerimeter(shrunk);
    if (perimeter <= 0.0) continue;
    const double distance = core::PolygonArea(shrunk) * options.unclip_ratio / perimeter;
    std::vector<core::Polygon> expanded = OffsetPolygon(shrunk, distance);
    // An expansion that splits or vanishes is not a text region (as in the references).
    if (expanded.size() != 1 || expanded[0].size() < 3) continue;
    const cv::RotatedRect rect = cv::minAreaRect(expanded[0]);
    if (ShorterSide(rect) < options.min_box_size + 2.0f) continue;

    core::TextInstance region;
    region.polygon = options.output == OutputShape::kQuadrilateral ? OrderedCorners(rect)
                                                                   : std::move(expanded[0]);
    for (cv::Point2f& p : region.polygon) {
      p.x = std::clamp(static_cast<float>(p.x / scale_x), 0.0f, max_x);
      p.y = std::clamp(static_cast<float>(p.y / scale_y), 0.0f, max_y);
    }
    region.score = static_cast<float>(score);
    regions.push_back(std::move(region));
  }
  return regions;
}

}  // namespace vision::models::dbnet
