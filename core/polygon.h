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
