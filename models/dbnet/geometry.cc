#include "models/dbnet/geometry.h"

#include <cmath>
#include <cstddef>

#include "polyclipping/clipper.hpp"

namespace vision::models::dbnet {

double PolygonPerimeter(const core::Polygon& polygon) {
  double length = 0.0;
  const size_t n = polygon.size();
  for (size_t i = 0; i < n; ++i) {
    const cv::Point2f& a = polygon[i];
    const cv::Point2f& b = polygon[(i + 1) % n];
    length += std::hypot(static_cast<double>(b.x) - a.x, static_cast<double>(b.y) - a.y);
  }
  return length;
}

std::vector<cv::Point> ToFixedPoint(const core::Polygon& polygon) {
  std::vector<cv::Point> fixed;
  fixed.reserve(polygon.size());
  for (const cv::Point2f& p : polygon) {
    fixed.emplace_back(static_cast<int>(std::lround(p.x * kFixedPointScale)),
                       static_cast<int>(std::lround(p.y * kFixedPointScale)));
  }
  return fixed;
}

std::vector<std::vector<cv::Point>> OffsetPolygonFixed(const core::Polygon& polygon, double delta) {
  ClipperLib::Path path;
  path.reserve(polygon.size());
  for (const cv::Point2f& p : polygon) {
    path.emplace_back(static_cast<ClipperLib::cInt>(std::llround(p.x * kFixedPointScale)),
                      static_cast<ClipperLib::cInt>(std::llround(p.y * kFixedPointScale)));
  }
  // Arc tolerance is in Clipper units: 0.25 px, pyclipper's default at unit scale.
  ClipperLib::ClipperOffset offset(/*miterLimit=*/2.0, /*roundPrecision=*/0.25 * kFixedPointScale);
  offset.AddPath(path, ClipperLib::jtRound, ClipperLib::etClosedPolygon);
  ClipperLib::Paths solution;
  offset.Execute(solution, delta * kFixedPointScale);
  std::vector<std::vector<cv::Point>> result;
  result.reserve(solution.size());
  for (const ClipperLib::Path& out : solution) {
    std::vector<cv::Point> points;
    points.reserve(out.size());
    for (const ClipperLib::IntPoint& p : out) {
      points.emplace_back(static_cast<int>(p.X), static_cast<int>(p.Y));
    }
    result.push_back(std::move(points));
  }
  return result;
}

std::vector<core::Polygon> OffsetPolygon(const core::Polygon& polygon, double delta) {
  std::vector<core::Polygon> result;
  for (const std::vector<cv::Point>& fixed : OffsetPolygonFixed(polygon, delta)) {
    core::Polygon points;
    points.reserve(fixed.size());
    for (const cv::Point& p : fixed) {
      points.emplace_back(static_cast<float>(p.x / kFixedPointScale),
                          static_cast<float>(p.y / kFixedPointScale));
    }
    result.push_back(std::move(points));
  }
  return result;
}

}  // namespace vision::models::dbnet
