// The one drawing library: every task's annotations and predictions drawn the same way, for
// TensorBoard images, the eval and infer tools and inspect_data. Texts are polygons (don't-care
// in grey); objects get their mask tinted, box and label (crowd regions hatched grey); label
// maps are blended in a colour per class (core/palette.h).
#ifndef VISION_ENGINE_DRAW_H_
#define VISION_ENGINE_DRAW_H_

#include <map>
#include <optional>
#include <string>

#include <opencv2/core.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/sample.h"

namespace vision::engine {

// 8-bit BGR for display: decoded images as they are; normalised float (RGB) images stretched
// per channel to 0..255.
cv::Mat Displayable(const cv::Mat& image);

struct DrawOptions {
  // One colour for every annotation (ground truth red, predictions green); unset: a colour
  // per class, grey for don't-care and crowd.
  std::optional<cv::Scalar> colour;
  int thickness = 1;
  // Tint object masks, and blend label maps in (outlines and boxes only otherwise).
  bool fill = true;
};

// Draws `sample`'s annotations onto `image` (8-bit BGR, in the sample's coordinates).
void DrawAnnotations(const core::Sample& sample, const DrawOptions& options, cv::Mat* image);

// `image` with each target map beside it as a heat map over its own range, named.
cv::Mat WithTargetsBeside(const cv::Mat& image, const std::map<std::string, cv::Mat>& targets);

// Reads truth.image_path and draws the ground truth's outlines in red (don't-care grey) and
// the prediction in green, its masks and label map filled.
absl::StatusOr<cv::Mat> DrawPrediction(const core::Sample& prediction, const core::Sample& truth);

// Writes DrawPrediction as <dir>/<image stem>.png.
absl::Status WriteDrawing(const std::string& dir, const core::Sample& prediction,
                          const core::Sample& truth);

}  // namespace vision::engine

#endif  // VISION_ENGINE_DRAW_H_
