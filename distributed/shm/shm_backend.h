// A c10d Backend for CPU tensors whose sum and average all-reduce of float, double, half and
// bfloat16 tensors goes through a shared-memory segment among the ranks of one host, and across
// hosts through Gloo; every other collective is Gloo's. (Gloo has no average: here it is the
// sum divided by the world size, in the same pass as the sum.)
//
// Within a node (local ranks 0..L-1 share a segment) each all-reduce is cut into chunks. Per
// chunk every rank copies its data into its own slot, all meet at a barrier, each rank sums one
// L-th of the chunk over all slots in local-rank order (a reduce-scatter, the L ranks working in
// parallel) into slot 0, and after the next barrier every rank copies the whole result back (an
// all-gather). Three sets of slots let one barrier per chunk serve both purposes (chunk c + 1 is
// copied in before the barrier that ends chunk c's reduction). Chunks are small (1 MiB for two
// ranks) so the slots stay in the last-level cache. With several nodes each local rank
// all-reduces its summed part with the same local rank of the other nodes through a Gloo group
// of its own (one per local rank) before that barrier.
//
// Results are bit-identical on every rank. The sum is taken in a fixed order: on one node,
// ((x0 + x1) + x2) + ...; with two ranks that is exactly Gloo's x0 + x1. Half and bfloat16 are
// summed in float and rounded once.
//
// Collectives run in order on one thread per backend, so a caller can launch several (the
// buckets of a backward pass) and wait later. A peer that does not arrive at a barrier within
// the timeout, or whose process is gone, fails the collective with its local and global rank;
// the backend then refuses further all-reduces.
//
// The segment lives only in memory: the node's local rank 0 creates it, every local rank maps
// it, and it is unlinked from /dev/shm as soon as all of them did, so a rank killed later
// (SIGKILL included) leaves no file; the kernel frees the memory with the last mapping.
#ifndef VISION_DISTRIBUTED_SHM_SHM_BACKEND_H_
#define VISION_DISTRIBUTED_SHM_SHM_BACKEND_H_

#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "absl/status/statusor.h"

namespace vision::distributed::shm {

// The backend's name, as the process group reports it.
inline constexpr char kShmBackendName[] = "shm";

struct ShmBackendOptions {
  int rank = 0;
  int world_size = 1;
  // Ranks are laid out node by node: node n holds global ranks [n * L, (n + 1) * L), as
  // torchrun and //tools:launch number them. 0 means every rank is on this host.
  int local_world_size = 0;
  // Name the segments after the job (its rendezvous port) and attempt, so restarts and other
  // jobs on the host never meet an old segment.
  int master_port = 0;
  int restart_count = 0;
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // Bytes of one rank's slot (the chunk size); the segment holds 3 slots per local rank. 0:
  // VISION_SHM_SLOT_KB if set, else 2 MiB / local ranks (at most 1 MiB, at least 64 KiB): a
  // 6 MiB segment up to 32 local ranks, far below Docker's default 64 MiB /dev/shm.
  int64_t slot_bytes = 0;
};

// Overrides the default slot size (in KiB) when ShmBackendOptions::slot_bytes is 0.
inline constexpr char kSlotKbVariable[] = "VISION_SHM_SLOT_KB";

// Makes a Gloo backend over `store` keys under `prefix` for `size` ranks (this one is `rank`).
using GlooFactory =
    std::function<c10::intrusive_ptr<c10d::Backend>(const std::string& prefix, int rank, int size)>;

// Collective over `store` (every rank of the job must call it): sets up the node's segment and,
// with several nodes, the cross-node Gloo group of this local rank. `gloo` carries every
// collective that does not go through shared memory. Errors say which rank and what to fix:
// a /dev/shm too small for the segment, ranks that do not join, an unusable layout.
absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> CreateShmBackend(
    const c10::intrusive_ptr<c10d::Store>& store, const ShmBackendOptions& options,
    c10::intrusive_ptr<c10d::Backend> gloo, const GlooFactory& make_gloo);

}  // namespace vision::distributed::shm

#endif  // VISION_DISTRIBUTED_SHM_SHM_BACKEND_H_
