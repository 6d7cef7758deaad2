// Model-specific training targets computed on the data side (DBNet's shrink and threshold
// maps; a detector's boxes, labels and masks). A model hands one to the loader, which runs it
// in its worker threads after the augmentations, so data/ never depends on models/.
#ifndef VISION_CORE_TARGET_GENERATOR_H_
#define VISION_CORE_TARGET_GENERATOR_H_

#include <map>
#include <string>

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "core/sample.h"

namespace vision::core {

class TargetGenerator {
 public:
  virtual ~TargetGenerator() = default;

  // Dense maps: fills sample->targets with single-channel HxW maps (stacked into
  // Batch::targets). Must be thread-safe (const, no shared mutable state), as must the rest.
  virtual absl::Status Generate(Sample* sample) const { return absl::OkStatus(); }

  // The value map `name` is padded with where an image is smaller than its batch.
  virtual float PadValue(const std::string& name) const { return 0.0f; }

  // Per-image targets of varying length (Batch::instances), after Generate.
  virtual absl::Status GenerateInstances(const Sample& sample,
                                         std::map<std::string, at::Tensor>* instances) const {
    return absl::OkStatus();
  }
};

}  // namespace vision::core

#endif  // VISION_CORE_TARGET_GENERATOR_H_
