#include "core/polygon.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include <opencv2/imgproc.hpp>

#include "polyclipping/clipper.hpp"

namespace vision::core {
namespace {

// Clipper units per pixel (see polygon.h).
constexpr double kClipperScale = 1024.0;

ClipperLib::Path ToPath(const Polygon& polygon) {
  ClipperLib::Path path;
  path.reserve(polygon.size());
  for (const cv::Point2f& p : polygon) {
    path.emplace_back(static_cast<ClipperLib::cInt>(std::llround(p.x * kClipperScale)),
                      static_cast<ClipperLib::cInt>(std::llround(p.y * kClipperScale)));
  }
  return path;
}

Polygon FromPath(const ClipperLib::Path& path) {
  Polygon polygon;
  polygon.reserve(path.size());
  for (const ClipperLib::IntPoint& p : path) {
    polygon.emplace_back(static_cast<float>(p.X / kClipperScale),
                         static_cast<float>(p.Y / kClipperScale));
  }
  return polygon;
}

// In square pixels. Clipper's results have positive outer rings and negative holes, so the
// signed sum is the covered area.
double AreaOf(const ClipperLib::Paths& paths) {
  double area = 0;
  for (const ClipperLib::Path& path : paths) area += ClipperLib::Area(path);
  return std::abs(area) / (kClipperScale * kClipperScale);
}

ClipperLib::Paths Intersect(const Polygon& subject, const Polygon& clip) {
  ClipperLib::Clipper clipper;
  clipper.AddPath(ToPath(subject), ClipperLib::ptSubject, /*Closed=*/true);
  clipper.AddPath(ToPath(clip), ClipperLib::ptClip, /*Closed=*/true);
  ClipperLib::Paths intersection;
  clipper.Execute(ClipperLib::ctIntersection, intersection, ClipperLib::pftNonZero,
                  ClipperLib::pftNonZero);
  return intersection;
}

// The smallest box holding the points seen so far.
class Extent {
 public:
  void Add(const Polygon& polygon) {
    for (const cv::Point2f& p : polygon) {
      x0_ = std::min(x0_, p.x);
      y0_ = std::min(y0_, p.y);
      x1_ = std::max(x1_, p.x);
      y1_ = std::max(y1_, p.y);
    }
  }
  cv::Rect2f Box() const { return cv::Rect2f(x0_, y0_, x1_ - x0_, y1_ - y0_); }

 private:
  float x0_ = std::numeric_limits<float>::max();
  float y0_ = std::numeric_limits<float>::max();
  float x1_ = std::numeric_limits<float>::lowest();
  float y1_ = std::numeric_limits<float>::lowest();
};

// A cheap test that spares Clipper most pairs of far-apart polygons.
bool BoundsOverlap(const Polygon& a, const Polygon& b) {
  const cv::Rect2f ra = cv::boundingRect(a), rb = cv::boundingRect(b);
  return ra.x <= rb.x + rb.width && rb.x <= ra.x + ra.width && ra.y <= rb.y + rb.height &&
         rb.y <= ra.y + ra.height;
}

// Twice the signed area of the triangle (a, b, c): > 0 when c lies left of a -> b. Float inputs
// make the differences and their products exact in double, so the sign is exact.
double Orientation(const cv::Point2f& a, const cv::Point2f& b, const cv::Point2f& c) {
  const double abx = static_cast<double>(b.x) - a.x, aby = static_cast<double>(b.y) - a.y;
  const double acx = static_cast<double>(c.x) - a.x, acy = static_cast<double>(c.y) - a.y;
  return abx * acy - aby * acx;
}

int Sign(double v) { return (v > 0) - (v < 0); }

// For c collinear with a and b: whether c lies on the closed segment [a, b].
bool WithinBox(const cv::Point2f& a, const cv::Point2f& b, const cv::Point2f& c) {
  return std::min(a.x, b.x) <= c.x && c.x <= std::max(a.x, b.x) && std::min(a.y, b.y) <= c.y &&
         c.y <= std::max(a.y, b.y);
}

// Whether the closed segments [a, b] and [c, d] share at least one point.
bool SegmentsMeet(const cv::Point2f& a, const cv::Point2f& b, const cv::Point2f& c,
                  const cv::Point2f& d) {
  const int o1 = Sign(Orientation(a, b, c)), o2 = Sign(Orientation(a, b, d));
  const int o3 = Sign(Orientation(c, d, a)), o4 = Sign(Orientation(c, d, b));
  if (o1 != o2 && o3 != o4) return true;
  return (o1 == 0 && WithinBox(a, b, c)) || (o2 == 0 && WithinBox(a, b, d)) ||
         (o3 == 0 && WithinBox(c, d, a)) || (o4 == 0 && WithinBox(c, d, b));
}

}  // namespace

bool IsValidSimplePolygon(const Polygon& polygon) {
  // Repeated consecutive points (the ring's closing point included) are no error for GEOS.
  Polygon ring;
  ring.reserve(polygon.size());
  for (const cv::Point2f& p : polygon) {
    if (!std::isfinite(p.x) || !std::isfinite(p.y)) return false;
    if (ring.empty() || p != ring.back()) ring.push_back(p);
  }
  while (ring.size() > 1 && ring.front() == ring.back()) ring.pop_back();
  const size_t n = ring.size();
  if (n < 3) return false;
  for (size_t i = 0; i < n; ++i) {
    const cv::Point2f& a = ring[i];
    const cv::Point2f& b = ring[(i + 1) % n];
    // The next edge shares b; it may not run back along this one (a spike of zero width).
    const cv::Point2f& c = ring[(i + 2) % n];
    if (Orientation(a, b, c) == 0 && (WithinBox(a, b, c) || WithinBox(b, c, a))) return false;
    // Edges that share no vertex may not meet at all. For a triangle every pair is adjacent.
    for (size_t j = i + 2; j < n; ++j) {
      if (i == 0 && j == n - 1) continue;  // the closing edge is adjacent to the first
      if (SegmentsMeet(a, b, ring[j], ring[(j + 1) % n])) return false;
    }
  }
  return PolygonArea(ring) > 0;
}

Polygon ConvexHull(const Polygon& polygon) {
  if (polygon.empty()) return {};
  Polygon hull;
  cv::convexHull(polygon, hull);
  return hull;
}

double PolygonArea(const Polygon& polygon) {
  double twice_area = 0;
  const size_t n = polygon.size();
  for (size_t i = 0; i < n; ++i) {
    const cv::Point2f& a = polygon[i];
    const cv::Point2f& b = polygon[(i + 1) % n];
    twice_area += static_cast<double>(a.x) * b.y - static_cast<double>(b.x) * a.y;
  }
  return std::abs(twice_area) / 2;
}

double FilledPolygonArea(const Polygon& polygon) {
  if (polygon.size() < 3) return 0;
  ClipperLib::Paths simple;
  ClipperLib::SimplifyPolygon(ToPath(polygon), simple, ClipperLib::pftNonZero);
  return AreaOf(simple);
}

double IntersectionArea(const Polygon& a, const Polygon& b) {
  if (a.size() < 3 || b.size() < 3 || !BoundsOverlap(a, b)) return 0;
  return AreaOf(Intersect(a, b));
}

cv::Rect2f PolygonBounds(const Polygon& polygon) {
  Extent extent;
  extent.Add(polygon);
  return extent.Box();
}

cv::Rect2f PolygonBounds(const std::vector<Polygon>& polygons) {
  Extent extent;
  for (const Polygon& polygon : polygons) extent.Add(polygon);
  return extent.Box();
}

std::vector<Polygon> ClipPolygonToCanvas(const Polygon& polygon, cv::Size canvas) {
  const bool inside = std::all_of(polygon.begin(), polygon.end(), [&](const cv::Point2f& p) {
    return p.x >= 0 && p.y >= 0 && p.x <= canvas.width && p.y <= canvas.height;
  });
  if (inside) return {polygon};
  const auto w = static_cast<float>(canvas.width);
  const auto h = static_cast<float>(canvas.height);
  std::vector<Polygon> pieces;
  for (const ClipperLib::Path& path : Intersect(polygon, {{0, 0}, {w, 0}, {w, h}, {0, h}})) {
    if (path.size() >= 3 && ClipperLib::Area(path) != 0) pieces.push_back(FromPath(path));
  }
  return pieces;
}

}  // namespace vision::core
