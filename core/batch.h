// A collated batch: tensors for the network, per-sample annotations kept as lists.
#ifndef VISION_CORE_BATCH_H_
#define VISION_CORE_BATCH_H_

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "core/sample.h"

namespace vision::core {

// The label of pixels that count for no class (Cityscapes' convention, and the value label
// maps are padded with).
inline constexpr uint8_t kIgnoreLabel = 255;

// The target that holds the samples' label maps (Sample::semantic), see Batch::targets.
inline constexpr char kSemanticTarget[] = "semantic";

struct Batch {
  // [N, 3, H, W] float, normalised; images smaller than the batch are padded bottom and right.
  at::Tensor images;
  // Each image's height and width before any padding (by the collation to the batch's size,
  // or by an augmentation: Sample::size_before_padding), [N, 2] int64 (on the host): models
  // clip boxes and crop outputs to it, as torchvision's ImageList.image_sizes.
  at::Tensor image_sizes;
  // Dense per-pixel targets, [N, H, W] each, padded like the images:
  //  - the target generator's maps (Sample::targets; DBNet's shrink and threshold maps), padded
  //    with its PadValue (0 unless it says otherwise), in the maps' element type: uint8 for
  //    8-bit maps (binary masks: a quarter of the bytes to move; the model converts them on
  //    its device), float otherwise;
  //  - "semantic" when the samples carry label maps (Sample::semantic): uint8 train ids,
  //    padded with kIgnoreLabel.
  std::map<std::string, at::Tensor> targets;
  // Per-image targets of varying length, made in the loader's worker threads (the list of
  // dicts torchvision's detection models take): instances[i] holds image i's tensors, e.g.
  // "boxes" [K, 4], "labels" [K], "masks" [K, H_i, W_i] (core/instance_targets.h). Empty when
  // the model's target generator makes none.
  std::vector<std::map<std::string, at::Tensor>> instances;
  // The samples' annotations (images released), for losses that need lists and for evaluation.
  std::vector<Sample> samples;
  // Each image's {height, width} as it came to the collation: after every augmentation (its
  // own padding included), before the padding to the batch's size. Empty when the batch was
  // not collated by data::Collate.
  std::vector<std::array<int64_t, 2>> collated_sizes;

  // targets[name], checked to have `sizes` (the [N, H, W] the caller's outputs have). A missing
  // target or another shape throws c10::Error starting with `who` (e.g. "DBNet::Losses"):
  // "<who>: the batch has no target '<name>' (it has: a, b); <hint>", where `hint` says what
  // supplies the target (the model's target generator, a dataset with label maps).
  const at::Tensor& Target(const std::string& name, c10::IntArrayRef sizes,
                           const std::string& who, const std::string& hint) const;

  // Moves every tensor to `device`. Copies from pinned host memory (the loader pins batches
  // for CUDA devices) do not block the host. image_sizes stays on the host.
  void To(const c10::Device& device);
};

// The batch as batches of images of one collated size each (groups in the order of their first
// image; within a group, the batch's order), so that no image is padded to another's size:
// each part equals what collating its samples alone gives. A batch of one size (or without
// collated_sizes) comes back whole. The tensors must be on the host (before Batch::To).
std::vector<Batch> SplitByCollatedSize(Batch batch);

}  // namespace vision::core

#endif  // VISION_CORE_BATCH_H_
