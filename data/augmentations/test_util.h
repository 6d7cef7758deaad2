// Helpers for the augmentation tests: exact rasterisation in the corner convention and plugin
// construction through the registry.
#ifndef VISION_DATA_AUGMENTATIONS_TEST_UTIL_H_
#define VISION_DATA_AUGMENTATIONS_TEST_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "absl/status/statusor.h"
#include "core/augmentation.h"
#include "core/sample.h"
#include "google/protobuf/message.h"

namespace vision::data::augmentations::testing {

// CV_8U mask, 1 where the pixel centre (col + 0.5, row + 0.5) lies inside or on `polygon`.
cv::Mat Rasterize(const core::Polygon& polygon, cv::Size size);

// Intersection over union of the non-zero pixels (1 when both are empty).
double MaskIoU(const cv::Mat& a, const cv::Mat& b);

// True when every pixel set in one mask is within `radius` pixels (chessboard distance) of a
// pixel set in the other: the masks differ only along their boundaries.
bool WithinBoundaryTolerance(const cv::Mat& a, const cv::Mat& b, int radius);

absl::StatusOr<std::unique_ptr<core::Augmentation>> MakeAugmentation(
    const std::string& name, const google::protobuf::Message& options);

// The x, y, width, height bounds of `points` (exact, unlike cv::boundingRect's integer box).
cv::Rect2f PointBounds(const std::vector<cv::Point2f>& points);

// An axis-aligned rectangle as a TL, TR, BR, BL polygon.
core::Polygon Rect(float x, float y, float width, float height);

}  // namespace vision::data::augmentations::testing

#endif  // VISION_DATA_AUGMENTATIONS_TEST_UTIL_H_
