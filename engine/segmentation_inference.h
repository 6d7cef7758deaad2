// Multi-scale, flip and sliding-window inference for semantic segmentation, usable with any
// core::SegmentationModel (evaluation.segmentation_inference in the pipeline config), as
// mmsegmentation's MultiScaleFlipAug with slide inference:
//   for every image, scale and flip: the image's valid region resized bilinearly by the scale
//   (and flipped), the model's logits on the whole of it or on sliding windows (logits of
//   overlapping windows averaged by a count map), flipped back, softmax, the probabilities
//   resized bilinearly to the original image size; the label map is the argmax of their mean.
// Every window is padded with zeros (the mean colour after normalisation, as mmsegmentation)
// at the bottom and right to the crop size, also the only window of an image smaller than the
// crop: the model sees inputs of the size it was trained on. The DANet authors' evaluation
// (PyTorch-Encoding's MultiEvalModule) pads its windows too, but with -mean/std (black), and
// fuses exp(logits) summed over scales where this averages probabilities. That costs compute at scales below the crop (a
// 256x512 image in 512x1024 windows is four times the pixels). Their stride, two thirds of the
// crop, is the default; the last window moves back inside the image (mmsegmentation) rather
// than hanging over its edge (theirs).
// With a single pass (one scale, no flip) there is nothing to average: the logits go straight
// to core::LabelMapFromScores, so scale 1 without windows is exactly the model's Predict on a
// batch without padding.
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
};

// Validates the config (ValidateSegmentationInferenceConfig) and resolves its defaults: empty
// scales -> {1}, stride 0 -> ceil(2/3 crop), max_batch_size 0 -> default_max_batch_size.
absl::StatusOr<SegmentationInferenceOptions> SegmentationInferenceOptionsFromProto(
    const core::SegmentationInferenceConfig& config, int64_t default_max_batch_size);

// A window of an image: rows [y, y + height), columns [x, x + width).
struct Window {
  int64_t y = 0;
  int64_t x = 0;
  int64_t height = 0;
  int64_t width = 0;
};

// mmsegmentation's sliding-window grid over a height x width image: origins 0, stride,
// 2 stride, ... along each axis, as many as ceil((size - crop) / stride) + 1, the last moved
// back to end at the image's edge; windows are min(crop, size) long. Covers every pixel when
// 1 <= stride <= crop.
std::vector<Window> SlidingWindows(int64_t height, int64_t width, int64_t crop_height,
                                   int64_t crop_width, int64_t stride_height, int64_t stride_width);

// Per image of `batch` (normalised images, padded; valid regions as core::OriginalRegion):
// the scores [C, H, W] at the original image size (sample.original_height/width, or the
// region's size where unset): the mean of the class probabilities over scales and flips, or,
// with a single pass, its logits. On the device of batch.images (the model's). Call in eval
// mode under no-grad; throws c10::Error on bad input (the evaluation loop guards it).
std::vector<at::Tensor> SegmentationScores(core::SegmentationModel& model, const core::Batch& batch,
                                           const SegmentationInferenceOptions& options);

// The label maps (Sample::semantic, uint8 train ids at the original size) of SegmentationScores.
std::vector<core::Sample> PredictSegmentation(core::SegmentationModel& model,
                                              const core::Batch& batch,
                                              const SegmentationInferenceOptions& options);

}  // namespace vision::engine

#endif  // VISION_ENGINE_SEGMENTATION_INFERENCE_H_
