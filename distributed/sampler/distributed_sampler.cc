#include "distributed/sampler/distributed_sampler.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"

namespace vision::distributed::sampler {
namespace {

// Uniform in [0, bound) without modulo bias: draws from the incomplete last block of size
// `bound` are rejected.
uint64_t UniformBelow(std::mt19937_64& engine, uint64_t bound) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t draw;
  do {
    draw = engine();
  } while (draw >= limit);
  return draw % bound;
}

std::vector<int64_t> EpochOrder(const DistributedSamplerOptions& options, int64_t epoch) {
  std::vector<int64_t> order(options.dataset_size);
  for (int64_t i = 0; i < options.dataset_size; ++i) order[i] = i;
  if (!options.shuffle) return order;
  // seed + epoch as torch's DistributedSampler, but mixed so that (seed, epoch + 1) and
  // (seed + 1, epoch) do not collide.
  std::seed_seq seq{static_cast<uint32_t>(options.seed), static_cast<uint32_t>(options.seed >> 32),
                    static_cast<uint32_t>(epoch), static_cast<uint32_t>(epoch >> 32)};
  std::mt19937_64 engine(seq);
  for (int64_t i = options.dataset_size - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(UniformBelow(engine, static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace

absl::StatusOr<DistributedSampler> DistributedSampler::Create(
    const DistributedSamplerOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("distributed sampler: rank ", options.rank,
                     " is outside [0, world_size=", options.world_size, ")"));
  }
  if (options.dataset_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("distributed sampler: dataset_size ", options.dataset_size, " is negative"));
  }
  if (options.drop_last && options.dataset_size < options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "distributed sampler: drop_last with ", options.dataset_size, " samples and ",
        options.world_size, " ranks leaves every rank empty; use fewer ranks or drop_last: false"));
  }
  if (!options.drop_last && options.dataset_size == 0) {
    return absl::InvalidArgumentError("distributed sampler: the dataset is empty");
  }
  return DistributedSampler(options);
}

DistributedSampler::DistributedSampler(const DistributedSamplerOptions& options)
    : options_(options),
      num_samples_(options.drop_last
                       ? options.dataset_size / options.world_size
                       : (options.dataset_size + options.world_size - 1) / options.world_size) {}

std::vector<int64_t> DistributedSampler::IndicesFrom(int64_t epoch, int64_t start_position) const {
  std::vector<int64_t> order = EpochOrder(options_, epoch);
  const int64_t total = num_samples_ * options_.world_size;
  // Padding repeats the order from its start, as often as needed (more than once only when
  // the dataset is smaller than the world).
  for (int64_t i = 0; static_cast<int64_t>(order.size()) < total; ++i) {
    const int64_t repeated = order[i];
    order.push_back(repeated);
  }
  order.resize(total);
  std::vector<int64_t> indices;
  const int64_t start = std::clamp<int64_t>(start_position, 0, num_samples_);
  indices.reserve(num_samples_ - start);
  for (int64_t k = start; k < num_samples_; ++k) {
    indices.push_back(order[options_.rank + k * options_.world_size]);
  }
  return indices;
}

}  // namespace vision::distributed::sampler
