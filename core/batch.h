// A collated batch: tensors for the network, per-sample annotations kept as lists.
#ifndef VISION_CORE_BATCH_H_
#define VISION_CORE_BATCH_H_

#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/sample.h"

namespace vision::core {

struct Batch {
  // [N, 3, H, W] float, normalised.
  at::Tensor images;
  // Stacked per-sample targets (Sample::targets), [N, H, W] each, in the maps' element type:
  // uint8 for 8-bit maps (binary masks: a quarter of the bytes to move to the device; the
  // model converts them there), float otherwise.
  std::map<std::string, at::Tensor> targets;
  // The samples' annotations (images released), for losses that need lists and for evaluation.
  std::vector<Sample> samples;
};

}  // namespace vision::core

#endif  // VISION_CORE_BATCH_H_
