// Test and benchmark support: runs a function in N forked processes (one per rank) and collects
// each rank's status, with a hard deadline so a deadlocked collective fails the test instead of
// hanging it.
//
// Fork before the parent touches any LibTorch state: a forked child inherits thread pools in
// an unusable state. Keep all torch work (including single-process references) in the ranks.
#ifndef VISION_DISTRIBUTED_PROCESS_GROUP_MULTIPROCESS_TESTING_H_
#define VISION_DISTRIBUTED_PROCESS_GROUP_MULTIPROCESS_TESTING_H_

#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace vision::distributed::process_group {

// A TCP port that was free a moment ago (bound to port 0, then released).
int PickFreePort();

// Forks `world_size` processes running fn(rank) and returns their statuses, indexed by rank.
// A process still running after `deadline` is killed and reported as DeadlineExceeded; one
// that crashed is reported as Internal with its signal or exit code.
std::vector<absl::Status> RunRanks(int world_size, absl::Duration deadline,
                                   const std::function<absl::Status(int rank)>& fn);

}  // namespace vision::distributed::process_group

#endif  // VISION_DISTRIBUTED_PROCESS_GROUP_MULTIPROCESS_TESTING_H_
