// Semantic-segmentation models: a Model whose prediction is a per-pixel class score map. The
// shared evaluation code (single-scale prediction here; multi-scale, flip and sliding-window
// inference in engine/) needs nothing else from a model, so every segmentation model gets
// them by implementing SegmentationLogits.
#ifndef VISION_CORE_SEGMENTATION_MODEL_H_
#define VISION_CORE_SEGMENTATION_MODEL_H_

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "core/batch.h"
#include "core/model.h"
#include "core/sample.h"

namespace vision::core {

class SegmentationModel : public Model {
 public:
  // Class scores (logits, before softmax) [N, NumClasses(), H, W] for normalised images
  // [N, 3, H, W], at the images' own size (the model upsamples its output). Used in eval mode.
  virtual at::Tensor SegmentationLogits(const at::Tensor& images) = 0;
  virtual int64_t NumClasses() const = 0;

  // Single-scale prediction: LabelMapsFromScores(batch, SegmentationLogits(batch.images)).
  std::vector<Sample> Predict(const Batch& batch) override;
};

// Turns per-class scores of a batch ([N, C, H, W], at the batch's padded size; logits or
// probabilities) into one Sample per image whose `semantic` is the label map (uint8 train
// ids) at the original image's size: each image's region in the batch (its size times the
// augmentations' scale, within image_sizes) is resized bilinearly to the original size, then
// the argmax over classes is taken. id and image_path are copied from the batch's samples.
std::vector<Sample> LabelMapsFromScores(const Batch& batch, const at::Tensor& scores);

// The same for one image: `scores` [C, h, w] cover exactly the original image (at any size;
// resized bilinearly to sample.original_height x original_width when they differ, or kept
// when the sample states no original size). Multi-scale inference, whose per-image scores
// are already at the original size, shares this with the single-scale path.
Sample LabelMapFromScores(const Sample& sample, const at::Tensor& scores);

// `model` as a SegmentationModel, for evaluation.segmentation_inference (multi-scale, flip and
// sliding-window inference needs per-pixel class scores); an InvalidArgument error naming the
// model's type when it is not one. Checked when a pipeline or the eval tool starts, and again
// by the evaluation loop.
absl::StatusOr<SegmentationModel*> SegmentationModelForInference(Model* model);

// The region of image i of `batch` that shows the original image: {height, width} in the
// batch's pixels (the original size times the sample's scale, clipped to image_sizes[i]).
std::vector<int64_t> OriginalRegion(const Batch& batch, int64_t i);

}  // namespace vision::core

#endif  // VISION_CORE_SEGMENTATION_MODEL_H_
