// Polygon helpers shared by DBNet's label generation (shrink) and post-processing (unclip);
// the geometry other plugins share too (areas, clipping) is in core/polygon.h.
#ifndef VISION_MODELS_DBNET_GEOMETRY_H_
#define VISION_MODELS_DBNET_GEOMETRY_H_

#include <vector>

#include "core/sample.h"

namespace vision::models::dbnet {

// Clipper works on integers: coordinates are stored with this many fractional bits, which is
// also the `shift` that cv::fillPoly takes, so offset results are drawn without rounding.
inline constexpr int kFixedPointShift = 8;
inline constexpr double kFixedPointScale = 1 << kFixedPointShift;

// Closed perimeter.
double PolygonPerimeter(const core::Polygon& polygon);

// Offsets a closed polygon by `delta` pixels (> 0 grows, < 0 shrinks) with round joins, as
// pyclipper's PyclipperOffset(JT_ROUND, ET_CLOSEDPOLYGON) does in the reference code, at
// 1/256 pixel precision and 0.25 pixel arc tolerance. A shrink can split a concave polygon
// into several pieces or make it vanish (empty result). Results are in fixed point
// (kFixedPointShift fractional bits), ready for cv::fillPoly(..., shift).
std::vector<std::vector<cv::Point>> OffsetPolygonFixed(const core::Polygon& polygon, double delta);

// The same in pixel coordinates.
std::vector<core::Polygon> OffsetPolygon(const core::Polygon& polygon, double delta);

// Pixel coordinates -> fixed point for cv::fillPoly(..., kFixedPointShift).
std::vector<cv::Point> ToFixedPoint(const core::Polygon& polygon);

}  // namespace vision::models::dbnet

#endif  // VISION_MODELS_DBNET_GEOMETRY_H_
