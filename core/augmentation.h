// The augmentation family: transforms a sample's image and every annotation consistently.
#ifndef VISION_CORE_AUGMENTATION_H_
#define VISION_CORE_AUGMENTATION_H_

#include <random>

#include "absl/status/status.h"
#include "core/plugin.h"
#include "core/sample.h"

namespace vision::core {

class Augmentation {
 public:
  static constexpr char kFamily[] = "augmentation";
  virtual ~Augmentation() = default;

  // Must draw randomness only from `rng` (seeded per sample by the loader) so results do not
  // depend on the number of loader threads. Thread-safe.
  virtual absl::Status Apply(Sample* sample, std::mt19937_64& rng) const = 0;
};

using AugmentationRegistry = PluginRegistry<Augmentation>;

}  // namespace vision::core

#endif  // VISION_CORE_AUGMENTATION_H_
