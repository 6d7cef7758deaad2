// Where this process sits in a distributed job, read from the environment its launcher set.
//
// Three sources, tried in order:
//  1. torchrun's contract (also what //tools:launch sets): RANK, WORLD_SIZE, LOCAL_RANK,
//     LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT.
//     Used when RANK or WORLD_SIZE is set.
//  2. Slurm's srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE or
//     SLURM_TASKS_PER_NODE, SLURM_NODEID; the master is the first host of SLURM_JOB_NODELIST
//     (or SLURM_NODELIST) and the port is derived from SLURM_JOB_ID, unless MASTER_ADDR /
//     MASTER_PORT are exported explicitly. Used when SLURM_PROCID is set.
//  3. Neither: a single process, rank 0 of 1.
//
// Every value is validated; an error names the variable, its value and which launcher
// normally sets it, so a misconfigured job fails at start-up instead of hanging in the first
// collective.
#ifndef VISION_DISTRIBUTED_ENV_DISTRIBUTED_ENV_H_
#define VISION_DISTRIBUTED_ENV_DISTRIBUTED_ENV_H_

#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vision::distributed::env {

// Which contract the values came from; only for logging and error messages.
enum class EnvSource { kTorchrun, kSlurm, kSingleProcess };

absl::string_view EnvSourceName(EnvSource source);

// Port used when nothing names one: torchrun's --master_port default.
inline constexpr int kDefaultMasterPort = 29500;

struct DistributedEnv {
  int rank = 0;              // Global rank, in [0, world_size).
  int world_size = 1;        // Processes in the whole job.
  int local_rank = 0;        // Rank on this node, in [0, local_world_size); picks the device.
  int local_world_size = 1;  // Processes on this node.
  // The node's index when the environment states it: NODE_RANK (exported by //tools:launch
  // and Lightning-style launchers) or SLURM_NODEID. torchrun only exports GROUP_RANK, which
  // equals the node rank under static rendezvous but is assigned by the rendezvous in elastic
  // mode, hence a separate, optional field.
  std::optional<int> node_rank;
  std::string master_addr = "127.0.0.1";  // Host of rank 0's rendezvous store.
  int master_port = kDefaultMasterPort;
  int group_rank = 0;     // torchrun's worker-group (node) rank; SLURM_NODEID under Slurm.
  int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT: how often the group was restarted.
  EnvSource source = EnvSource::kSingleProcess;

  bool is_distributed() const { return world_size > 1; }
};

// Reads and validates the environment through `getenv` (a fake in tests).
absl::StatusOr<DistributedEnv> ReadDistributedEnv(
    const std::function<const char*(const char*)>& getenv = ::getenv);

// The first host of a Slurm hostlist: "node[01-04,07],gpu5" -> "node01",
// "rack[2-3]-n[5,9]" -> "rack2-n5", "login1,login2" -> "login1". Zero padding is kept as
// written. Errors on an empty list, unbalanced brackets or a malformed range.
absl::StatusOr<std::string> FirstHostOfHostlist(absl::string_view hostlist);

// Slurm's compressed tasks-per-node list, one entry per node: "4(x2),3" -> {4, 4, 3}.
absl::StatusOr<std::vector<int>> ParseSlurmTasksPerNode(absl::string_view tasks_per_node);

}  // namespace vision::distributed::env

#endif  // VISION_DISTRIBUTED_ENV_DISTRIBUTED_ENV_H_
