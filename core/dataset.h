// The dataset family: random access to samples in an on-disk format.
#ifndef VISION_CORE_DATASET_H_
#define VISION_CORE_DATASET_H_

#include <cstdint>
#include <optional>
#include <string>

#include <opencv2/core.hpp>

#include "absl/status/statusor.h"
#include "core/plugin.h"
#include "core/sample.h"
#include "core/task_metadata.h"

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
  // The annotations' kind and class table, which the pipeline builder checks against the
  // model, the evaluator and the other split. nullopt states nothing, and nothing is checked:
  // for fakes and unannotated images, not for a dataset with annotations.
  virtual std::optional<DatasetMetadata> Metadata() const { return std::nullopt; }
  // The annotations evaluators score for sample `index`, whose Load() gave `loaded`: as the
  // annotation file states them, as the reference evaluator reads them. The default is
  // `loaded`'s annotations without its image; a dataset that changes annotations for training
  // (COCO clamps boxes and polygon vertices to the image) overrides it.
  virtual absl::StatusOr<Sample> GroundTruth(int64_t index, const Sample& loaded) const {
    Sample truth = loaded;
    truth.image = cv::Mat();
    truth.targets.clear();
    return truth;
  }
  // The size of sample `index`'s image as Load() gives it (before augmentations), for batching
  // images by shape (the loader's aspect-ratio grouping). The default decodes the sample with
  // Load(), so a first use reads every image of the dataset; a dataset whose annotations state
  // its images' sizes (COCO's "width" and "height") overrides it to answer without decoding.
  virtual absl::StatusOr<cv::Size> ImageSize(int64_t index) const {
    absl::StatusOr<Sample> sample = Load(index);
    if (!sample.ok()) return sample.status();
    return sample->image.size();
  }
};

using DatasetRegistry = PluginRegistry<Dataset>;

}  // namespace vision::core

#endif  // VISION_CORE_DATASET_H_
