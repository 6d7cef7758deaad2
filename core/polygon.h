// Polygon geometry beside the type it serves (core::Polygon, core/sample.h), for every plugin
// that handles text regions or instance masks: areas, bounds, clipping and intersection.
//
// Two areas, for two needs:
//  - PolygonArea: the shoelace formula on the points as given, in double precision; exact for
//    a simple polygon, while a self-intersecting one's lobes of opposite orientation cancel.
//  - FilledPolygonArea and IntersectionArea: the area covered under the non-zero fill rule
//    (each lobe of a self-intersecting polygon counts), computed exactly by Clipper
//    (libpolyclipping).
// Clipper works on integers: clipping and the filled areas round coordinates to 1/1024 px, far
// below annotation noise, and coordinates up to 10^6 px stay in Clipper's fast 64-bit range.
//
// Validity, for the data policy on damaged annotations (README, "Data policies"): a polygon is
// valid when it is what shapely (GEOS) calls a valid simple polygon, the test the reference
// ICDAR evaluators apply before matching. The ICDAR2015 dataset repairs invalid quadrilaterals
// when it reads them (and counts them), and the ICDAR2015 evaluator drops invalid polygons.
#ifndef VISION_CORE_POLYGON_H_
#define VISION_CORE_POLYGON_H_

#include <vector>

#include <opencv2/core.hpp>

#include "core/sample.h"

namespace vision::core {

// Absolute area of a simple polygon (shoelace formula); 0 for fewer than 3 points.
double PolygonArea(const Polygon& polygon);

// Area covered under the non-zero fill rule; 0 for fewer than 3 points.
double FilledPolygonArea(const Polygon& polygon);

// Area of the intersection of the regions `a` and `b` cover under the non-zero fill rule.
double IntersectionArea(const Polygon& a, const Polygon& b);

// Whether `polygon`, taken as a closed ring, is a valid simple polygon as shapely judges it
// (Polygon(points).is_valid and .is_simple): after dropping repeated consecutive points at
// least 3 vertices remain, no two edges meet except adjacent ones at their shared vertex (no
// crossing as in a bow-tie, no touching, no edge doubling back over the previous one), and so
// the area is positive. Exact for float coordinates (the tests are done in double precision,
// where products of float differences are exact).
bool IsValidSimplePolygon(const Polygon& polygon);

// The convex hull of the points, counter-clockwise in image coordinates' y-down sense as
// cv::convexHull orders it; the repair for a self-intersecting quadrilateral, whose crossing
// comes from two swapped vertices (the hull of a bow-tie's 4 points is the intended box).
Polygon ConvexHull(const Polygon& polygon);

// The tightest x, y, width, height box around every point, unrounded (cv::boundingRect
// rounds outwards to whole pixels); only meaningful for at least one point.
cv::Rect2f PolygonBounds(const Polygon& polygon);
cv::Rect2f PolygonBounds(const std::vector<Polygon>& polygons);

// The parts of `polygon` inside [0, width] x [0, height]: none when nothing of it is
// visible, several when clipping splits it, and `polygon` itself, points unchanged, when it
// lies entirely inside.
std::vector<Polygon> ClipPolygonToCanvas(const Polygon& polygon, cv::Size canvas);

}  // namespace vision::core

#endif  // VISION_CORE_POLYGON_H_
