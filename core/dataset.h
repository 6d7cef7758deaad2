// The dataset family: random access to samples in an on-disk format.
#ifndef VISION_CORE_DATASET_H_
#define VISION_CORE_DATASET_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/plugin.h"
#include "core/sample.h"

namespace vision::core {

class Dataset {
 public:
  static constexpr char kFamily[] = "dataset";
  virtual ~Dataset() = default;

  virtual int64_t Size() const = 0;
  // Decodes sample `index`; errors name the file (and line or annotation id). Thread-safe.
  virtual absl::StatusOr<Sample> Load(int64_t index) const = 0;
  // One line for logs: format, root, split and size.
  virtual std::string Describe() const = 0;
};

using DatasetRegistry = PluginRegistry<Dataset>;

}  // namespace vision::core

#endif  // VISION_CORE_DATASET_H_
