// Batches of images of similar shape: torchvision's detection reference's aspect-ratio grouping
// (references/detection/group_by_aspect_ratio.py: create_aspect_ratio_groups and
// GroupedBatchSampler), which the loader applies to each rank's share of an epoch
// (LoaderOptions::aspect_ratio_group_factor).
#ifndef VISION_DATA_LOADER_ASPECT_RATIO_GROUPS_H_
#define VISION_DATA_LOADER_ASPECT_RATIO_GROUPS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dataset.h"

namespace vision::data {

// The largest group factor accepted: a guard against typos, far beyond use (torchvision's
// detection recipes use 3).
inline constexpr int kMaxAspectRatioGroupFactor = 1000;

// The bin edges of create_aspect_ratio_groups(dataset, k): 2^linspace(-1, 1, 2k + 1) for k > 0
// (computed as numpy does, so the edges are the same doubles), {1} for k = 0. An error for
// k < 0 or k > kMaxAspectRatioGroupFactor.
absl::StatusOr<std::vector<double>> AspectRatioBinEdges(int k);

// The group of an image of `width` x `height` (> 0) under `edges` (ascending): how many edges
// are <= width / height (Python's bisect_right, as torchvision's _quantize), in
// [0, edges.size()].
int AspectRatioGroup(int64_t width, int64_t height, const std::vector<double>& edges);

// The group of every sample of `dataset` for factor `k`, from Dataset::ImageSize (which decodes
// every image where the dataset does not state their sizes). Errors name the sample.
absl::StatusOr<std::vector<int>> AspectRatioGroups(const core::Dataset& dataset, int k);

// The batches torchvision's GroupedBatchSampler(sampler, group_ids, batch_size) yields over a
// sampler that yields `order` (dataset indices; `group_of` is indexed by them): each index joins
// its group's buffer and a full buffer is the next batch. At the end the order.size() /
// batch_size - (batches so far) batches still missing are the fullest buffers (ties in the order
// in which Python's dict holds them: by the group's first index, or its last full batch if it
// had one), each completed with its group's indices of `order` from the first on, repeated as
// needed. So there are always order.size() / batch_size batches, each of one group, and some
// indices appear twice. An error if an index has no group.
absl::StatusOr<std::vector<std::vector<int64_t>>> GroupedBatches(const std::vector<int64_t>& order,
                                                                 const std::vector<int>& group_of,
                                                                 int batch_size);

}  // namespace vision::data

#endif  // VISION_DATA_LOADER_ASPECT_RATIO_GROUPS_H_
