#include "data/loader/aspect_ratio_groups.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace vision::data {

absl::StatusOr<std::vector<double>> AspectRatioBinEdges(int k) {
  if (k < 0 || k > kMaxAspectRatioGroupFactor) {
    return absl::InvalidArgumentError(
        absl::StrCat("aspect_ratio_group_factor must be -1 (off) or in [0, ",
                     kMaxAspectRatioGroupFactor, "], got ", k));
  }
  if (k == 0) return std::vector<double>{1.0};
  // numpy.linspace(-1, 1, 2k + 1): i * step + start with step = (stop - start) / (num - 1), the
  // last point set to stop; then numpy's 2 ** y, the C library's pow.
  const int num = 2 * k + 1;
  const double step = 2.0 / (num - 1);
  std::vector<double> edges(num);
  for (int i = 0; i < num; ++i) {
    const double y = i == num - 1 ? 1.0 : static_cast<double>(i) * step + -1.0;
    edges[i] = std::pow(2.0, y);
  }
  return edges;
}

int AspectRatioGroup(int64_t width, int64_t height, const std::vector<double>& edges) {
  const double ratio = static_cast<double>(width) / static_cast<double>(height);
  return static_cast<int>(std::upper_bound(edges.begin(), edges.end(), ratio) - edges.begin());
}

absl::StatusOr<std::vector<int>> AspectRatioGroups(const core::Dataset& dataset, int k) {
  absl::StatusOr<std::vector<double>> edges = AspectRatioBinEdges(k);
  if (!edges.ok()) return edges.status();
  std::vector<int> groups(static_cast<size_t>(dataset.Size()));
  for (int64_t i = 0; i < dataset.Size(); ++i) {
    absl::StatusOr<cv::Size> size = dataset.ImageSize(i);
    if (!size.ok()) {
      return absl::Status(size.status().code(),
                          absl::StrCat("aspect-ratio grouping: the size of sample ", i, ": ",
                                       size.status().message()));
    }
    if (size->width <= 0 || size->height <= 0) {
      return absl::DataLossError(absl::StrCat("aspect-ratio grouping: sample ", i, " has size ",
                                              size->width, "x", size->height,
                                              " (width x height); both must be > 0"));
    }
    groups[i] = AspectRatioGroup(size->width, size->height, *edges);
  }
  return groups;
}

absl::StatusOr<std::vector<std::vector<int64_t>>> GroupedBatches(const std::vector<int64_t>& order,
                                                                 const std::vector<int>& group_of,
                                                                 int batch_size) {
  if (batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batch_size must be >= 1, got ", batch_size));
  }
  const size_t b = static_cast<size_t>(batch_size);
  struct Group {
    std::vector<int64_t> buffer;
    // Every index of the group so far, in order (the end-of-epoch fill draws from it).
    std::vector<int64_t> seen;
    // Where Python's dict of buffers holds the group: torchvision's defaultdict makes the key
    // at the group's first index and, after a full batch, deletes it and makes it again at
    // once (the check that follows reads it), at the end of the dict's order.
    int64_t key_made_at = 0;
  };
  std::map<int, Group> groups;
  std::vector<std::vector<int64_t>> batches;
  for (size_t position = 0; position < order.size(); ++position) {
    const int64_t index = order[position];
    if (index < 0 || index >= static_cast<int64_t>(group_of.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "aspect-ratio grouping: index ", index, " at position ", position,
          " of the epoch's order is outside the dataset's ", group_of.size(), " samples"));
    }
    auto [it, made] = groups.try_emplace(group_of[index]);
    Group& group = it->second;
    if (made) group.key_made_at = static_cast<int64_t>(position);
    group.buffer.push_back(index);
    group.seen.push_back(index);
    if (group.buffer.size() == b) {
      batches.push_back(std::move(group.buffer));
      group.buffer.clear();
      group.key_made_at = static_cast<int64_t>(position);
    }
  }
  const size_t expected = order.size() / b;
  if (batches.size() >= expected) return batches;
  // The fullest buffers first; Python's sort is stable, so ties keep the dict's order.
  std::vector<Group*> leftovers;
  for (auto& [id, group] : groups) leftovers.push_back(&group);
  std::stable_sort(leftovers.begin(), leftovers.end(), [](const Group* x, const Group* y) {
    if (x->buffer.size() != y->buffer.size()) return x->buffer.size() > y->buffer.size();
    return x->key_made_at < y->key_made_at;
  });
  for (Group* group : leftovers) {
    if (batches.size() == expected) break;
    std::vector<int64_t> batch = std::move(group->buffer);
    for (size_t i = 0; batch.size() < b; ++i) batch.push_back(group->seen[i % group->seen.size()]);
    batches.push_back(std::move(batch));
  }
  return batches;
}

}  // namespace vision::data
