// Model-specific training targets computed on the data side (DBNet's shrink and threshold
// maps, say). A model hands one to the loader, which runs it in its worker threads after the
// augmentations, so data/ never depends on models/.
#ifndef VISION_CORE_TARGET_GENERATOR_H_
#define VISION_CORE_TARGET_GENERATOR_H_

#include "absl/status/status.h"
#include "core/sample.h"

namespace vision::core {

class TargetGenerator {
 public:
  virtual ~TargetGenerator() = default;
  // Fills sample->targets. Must be thread-safe (const, no shared mutable state).
  virtual absl::Status Generate(Sample* sample) const = 0;
};

}  // namespace vision::core

#endif  // VISION_CORE_TARGET_GENERATOR_H_
