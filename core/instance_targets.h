// Detection and instance-segmentation targets from a Sample's objects, in the layout
// torchvision's detection models take, made in the loader's worker threads so the training
// thread never rasterises a mask.
#ifndef VISION_CORE_INSTANCE_TARGETS_H_
#define VISION_CORE_INSTANCE_TARGETS_H_

#include <map>
#include <string>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "core/sample.h"
#include "core/target_generator.h"

namespace vision::core {

struct InstanceTargetOptions {
  // Rasterise each object's mask (polygons filled, RLE decoded) at the image's size.
  bool masks = true;
  // Keep crowd regions (flagged in "is_crowd") instead of leaving them out.
  bool crowd = false;
};

// For the K objects of `sample` (after augmentation, in its current pixels):
//   "boxes"    [K, 4] float, x1, y1, x2, y2;
//   "labels"   [K] int64, the dataset's contiguous class indices;
//   "is_crowd" [K] uint8;
//   "masks"    [K, H, W] uint8 in {0, 1} (with options.masks), H x W the image's size.
// An object's RLE of another size than the image is an error naming its annotation.
absl::StatusOr<std::map<std::string, at::Tensor>> MakeInstanceTargets(
    const Sample& sample, const InstanceTargetOptions& options);

// A target generator that makes exactly these per-image targets (no dense maps).
class InstanceTargetGenerator : public TargetGenerator {
 public:
  explicit InstanceTargetGenerator(InstanceTargetOptions options) : options_(options) {}
  absl::Status GenerateInstances(const Sample& sample,
                                 std::map<std::string, at::Tensor>* instances) const override;

 private:
  InstanceTargetOptions options_;
};

}  // namespace vision::core

#endif  // VISION_CORE_INSTANCE_TARGETS_H_
