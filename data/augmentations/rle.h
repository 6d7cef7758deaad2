// COCO run-length masks <-> 8-bit rasters, so mask annotations can be warped like images.
#ifndef VISION_DATA_AUGMENTATIONS_RLE_H_
#define VISION_DATA_AUGMENTATIONS_RLE_H_

#include <opencv2/core.hpp>

#include "absl/status/statusor.h"
#include "core/sample.h"

namespace vision::data::augmentations {

// HxW CV_8U, 1 on the mask, 0 elsewhere. Fails when the counts do not add up to H * W.
absl::StatusOr<cv::Mat> DecodeRle(const core::RunLengthMask& rle);

// Encodes the non-zero pixels of an HxW CV_8U mask (column-major, background run first).
core::RunLengthMask EncodeRle(const cv::Mat& mask);

}  // namespace vision::data::augmentations

#endif  // VISION_DATA_AUGMENTATIONS_RLE_H_
