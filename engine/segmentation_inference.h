// Multi-scale, flip and sliding-window inference for semantic segmentation, usable with any
// core::SegmentationModel (evaluation.segmentation_inference in the pipeline config). For every
// image and scale, the image's valid region is resized bilinearly by the scale and the model
// runs on the whole of it or on sliding windows, each window padded at the bottom and right to
// the crop size with pad_value (also the only window of an image smaller than the crop: the
// model sees inputs of the size it was trained on; that costs compute at scales below the crop).
// Two sets of rules, chosen field by field:
//  - mmsegmentation's MultiScaleFlipAug with slide inference (the defaults): windows inside the
//    image (the last moved back to end at its edge), padding 0 (the mean colour after
//    normalisation), the flipped image a pass of its own; per pass the window logits are
//    averaged where windows overlap, flipped back, softmax, resized to the original size
//    (align_corners false); the probabilities are averaged over passes.
//  - PyTorch-Encoding's MultiEvalModule, the DANet authors' evaluation (OVERHANG, pad_value
//    -mean/std, SUM_EXP_LOGITS, align_corners): the last window hangs over the image's edge and
//    is padded black; every window and its mirror give exp(logits + mirrored logits mirrored
//    back), averaged where windows overlap, resized to the original size (align_corners true)
//    and summed over scales. models/danet/RECIPE.md cites their code.
// The default stride is theirs, two thirds of the crop rounded down.
// With a single pass (one scale, no flip, MEAN_PROBABILITIES) there is nothing to average: the
// logits go straight to core::LabelMapFromScores, so scale 1 without windows is exactly the
// model's Predict on a batch without padding.
#ifndef VISION_ENGINE_SEGMENTATION_INFERENCE_H_
#define VISION_ENGINE_SEGMENTATION_INFERENCE_H_

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "core/batch.h"
#include "core/config/pipeline.pb.h"
#include "core/sample.h"
#include "core/segmentation_model.h"

namespace vision::engine {

enum class WindowPlacement {
  kShiftInside,  // the last window moves back to end at the image's edge (mmsegmentation)
  kOverhang,     // the last window hangs over the edge, padded (PyTorch-Encoding)
};

enum class ScoreFusion {
  kMeanProbabilities,  // mean of softmax over passes (mmsegmentation)
  kSumExpLogits,       // sum over scales of exp(logits + mirrored logits) (PyTorch-Encoding)
};

struct SegmentationInferenceOptions {
  // Factors of each image's valid region as fed (resized to round(size * scale), at least 1).
  std::vector<double> scales = {1.0};
  // Also the horizontally flipped image at every scale.
  bool flip = false;
  // Sliding windows of this size when a scaled image is larger; 0 x 0: whole images.
  int64_t crop_height = 0;
  int64_t crop_width = 0;
  // Step between window origins, in [1, crop].
  int64_t stride_height = 0;
  int64_t stride_width = 0;
  // Model inputs (windows or whole images) per forward pass, >= 1.
  int64_t max_batch_size = 1;
  WindowPlacement window_placement = WindowPlacement::kShiftInside;
  // Padding of windows, in model input units: empty (0), one value or one per channel.
  std::vector<double> pad_value;
  ScoreFusion fusion = ScoreFusion::kMeanProbabilities;
  // Bilinear resizes (image to each scale, scores to the original size) with align_corners.
  bool align_corners = false;
};

// Validates the config (ValidateSegmentationInferenceConfig) and resolves its defaults: empty
// scales -> {1}, stride 0 -> floor(2/3 crop) (at least 1), max_batch_size 0 ->
// default_max_batch_size.
absl::StatusOr<SegmentationInferenceOptions> SegmentationInferenceOptionsFromProto(
    const core::SegmentationInferenceConfig& config, int64_t default_max_batch_size);

// The length of a side of `size` pixels at `scale`: round(size * scale), at least 1. (The
// DANet authors set the longer side to ceil(base_size * scale) and the shorter in proportion,
// rounded; for Cityscapes' 2048x1024 images and base size 2048 both give the same sizes.)
int64_t ScaledSize(int64_t size, double scale);

// A window of an image: rows [y, y + height), columns [x, x + width).
struct Window {
  int64_t y = 0;
  int64_t x = 0;
  int64_t height = 0;
  int64_t width = 0;
};

// The sliding-window grid over a height x width image: origins 0, stride, 2 stride, ... along
// each axis, as many as ceil((size - crop) / stride) + 1 (one when size <= crop). kShiftInside:
// the last is moved back to end at the image's edge (mmsegmentation), windows are min(crop,
// size) long. kOverhang: origins stay (PyTorch-Encoding) and a window is the part of
// [origin, origin + crop) inside the image; the model sees it padded to the crop. Row by
// row, columns within a row. Covers every pixel when 1 <= stride <= crop.
std::vector<Window> SlidingWindows(int64_t height, int64_t width, int64_t crop_height,
                                   int64_t crop_width, int64_t stride_height, int64_t stride_width,
                                   WindowPlacement placement = WindowPlacement::kShiftInside);

// Per image of `batch` (normalised images, padded; valid regions as core::OriginalRegion):
// the scores [C, H, W] (float) at the original image size (sample.original_height/width, or
// the region's size where unset), whose argmax is the label map. kMeanProbabilities: the mean
// of the class probabilities over scales and flips, or, with a single pass, its logits.
// kSumExpLogits: the log of PyTorch-Encoding's summed scores (made in float64, so that no
// logit overflows exp). On the device of batch.images (the model's). Call in eval mode under
// no-grad; throws c10::Error on bad input (the evaluation loop guards it).
std::vector<at::Tensor> SegmentationScores(core::SegmentationModel& model, const core::Batch& batch,
                                           const SegmentationInferenceOptions& options);

// The label maps (Sample::semantic, uint8 train ids at the original size) of SegmentationScores.
std::vector<core::Sample> PredictSegmentation(core::SegmentationModel& model,
                                              const core::Batch& batch,
                                              const SegmentationInferenceOptions& options);

}  // namespace vision::engine

#endif  // VISION_ENGINE_SEGMENTATION_INFERENCE_H_
