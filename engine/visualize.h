// Drawing predictions over ground truth, for TensorBoard images and the eval tool: texts and
// object outlines of the ground truth in red (don't-care in grey), predictions in green.
#ifndef VISION_ENGINE_VISUALIZE_H_
#define VISION_ENGINE_VISUALIZE_H_

#include "absl/status/statusor.h"
#include "core/sample.h"

namespace vision::engine {

// Reads truth.image_path and draws both samples' annotations on it (8-bit BGR).
absl::StatusOr<cv::Mat> DrawPrediction(const core::Sample& prediction, const core::Sample& truth);

}  // namespace vision::engine

#endif  // VISION_ENGINE_VISUALIZE_H_
