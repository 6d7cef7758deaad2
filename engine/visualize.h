// Drawing predictions over ground truth, for TensorBoard images and the eval tool: texts and
// object outlines of the ground truth in red (don't-care in grey), predictions in green.
#ifndef VISION_ENGINE_VISUALIZE_H_
#define VISION_ENGINE_VISUALIZE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/sample.h"

namespace vision::engine {

// Reads truth.image_path and draws both samples' annotations on it (8-bit BGR).
absl::StatusOr<cv::Mat> DrawPrediction(const core::Sample& prediction, const core::Sample& truth);

// Writes <dir>/res_<image stem>.txt, one detected text per line as x1,y1,...,xn,yn (the ICDAR
// result format), and, when `draw`, <dir>/<image stem>.png from DrawPrediction. `truth` names
// the image and may carry no annotations (inference).
absl::Status WritePrediction(const std::string& dir, const core::Sample& prediction,
                             const core::Sample& truth, bool draw);

}  // namespace vision::engine

#endif  // VISION_ENGINE_VISUALIZE_H_
