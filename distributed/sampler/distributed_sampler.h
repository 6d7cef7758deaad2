// Splits a dataset's indices over data-parallel ranks, one permutation per epoch.
//
// As torch.utils.data.DistributedSampler: the epoch's order (shuffled by (seed, epoch), or
// the identity) is padded to a multiple of the world size by repeating its first indices
// (drop_last = false) or truncated to one (drop_last = true); rank r takes positions
// r, r + world, r + 2 * world, ... Every rank thus gets the same number of samples, so all
// ranks run the same number of steps and no collective waits for a rank that ran out.
//
// The permutation uses std::mt19937_64 and our own Fisher-Yates shuffle (no
// std::uniform_int_distribution, whose output differs between standard libraries), so a
// seed means the same order everywhere and across restarts.
#ifndef VISION_DISTRIBUTED_SAMPLER_DISTRIBUTED_SAMPLER_H_
#define VISION_DISTRIBUTED_SAMPLER_DISTRIBUTED_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace vision::distributed::sampler {

struct DistributedSamplerOptions {
  int64_t dataset_size = 0;
  int rank = 0;
  int world_size = 1;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
};

// Where a rank is in its stream of samples: resuming at (epoch, position) continues with
// IndicesFrom(epoch, position).
struct SamplerState {
  int64_t epoch = 0;
  int64_t position = 0;  // Samples of this rank's share already consumed in `epoch`.
};

class DistributedSampler {
 public:
  static absl::StatusOr<DistributedSampler> Create(const DistributedSamplerOptions& options);

  // This rank's indices for `epoch`, in order.
  std::vector<int64_t> Indices(int64_t epoch) const { return IndicesFrom(epoch, 0); }
  // This rank's indices for `epoch` from its `start_position`-th sample on (clamped to the
  // end: resuming after the last sample of an epoch yields nothing).
  std::vector<int64_t> IndicesFrom(int64_t epoch, int64_t start_position) const;
  std::vector<int64_t> IndicesFrom(const SamplerState& state) const {
    return IndicesFrom(state.epoch, state.position);
  }
  // Samples per rank and epoch.
  int64_t NumSamples() const { return num_samples_; }

 private:
  explicit DistributedSampler(const DistributedSamplerOptions& options);

  DistributedSamplerOptions options_;
  int64_t num_samples_;
};

}  // namespace vision::distributed::sampler

#endif  // VISION_DISTRIBUTED_SAMPLER_DISTRIBUTED_SAMPLER_H_
