// A torchrun-compatible local launcher: starts one worker process per local rank with
// torchrun's environment contract (see distributed/env/distributed_env.h), relays their
// output line by line as "[rank N]: ...", and supervises them.
//
// Supervision, as torchrun's local elastic agent with a static rendezvous:
//  - every worker runs in its own process group, so a signal to the group also reaches the
//    processes it started (data loader helpers, shells);
//  - SIGINT/SIGTERM to the launcher are forwarded to every worker group; after the grace
//    period the groups get SIGKILL; the launcher then exits with 128 + the signal number;
//  - when a worker exits non-zero or dies by a signal, the others are stopped (SIGTERM with
//    SIGCONT, so a stopped worker acts on it at once; grace; SIGKILL). With restarts left the whole local group is started again with
//    TORCHELASTIC_RESTART_COUNT incremented (workers resume from their latest checkpoint);
//    otherwise a summary names each failed rank and its exit code or signal, and the launcher
//    exits with kWorkerFailureExitCode;
//  - when every worker exits 0, the launcher exits 0.
// Every wait is bounded, so the launcher itself never hangs on a stuck worker.
//
// Multi-node: each node runs its own launcher with the same --nnodes/--nproc_per_node/
// --master_addr/--master_port and its own --node_rank. Restarts are decided per node: a failed
// node restarts its own group, while its peers' collectives time out (the process group's
// timeout), which fails their workers too, so every node restarts and all of them meet again
// at the rendezvous with the same TORCHELASTIC_RESTART_COUNT. Give every node the same
// --max_restarts.
#ifndef VISION_DISTRIBUTED_LAUNCH_LAUNCHER_H_
#define VISION_DISTRIBUTED_LAUNCH_LAUNCHER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace vision::distributed::launch {

// Exit code of the launcher when workers failed and no restart was left.
inline constexpr int kWorkerFailureExitCode = 1;

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int max_restarts = 0;
  // How often worker exits are checked; output is relayed as soon as it arrives.
  absl::Duration monitor_interval = absl::Milliseconds(100);
  // Time workers get between SIGTERM and SIGKILL, and for their output to drain afterwards.
  absl::Duration grace_period = absl::Seconds(5);
  // The training program and its arguments; command[0] is looked up in PATH.
  std::vector<std::string> command;
};

absl::Status ValidateLaunchOptions(const LaunchOptions& options);

// The environment of `local_rank`'s worker: `base` ("NAME=value" entries, normally the
// launcher's own environ) with the distributed contract set on top. OMP_NUM_THREADS=1 is
// added when more than one worker shares the node and `base` does not set it, as torchrun
// does, so the workers do not oversubscribe the cores.
std::vector<std::string> WorkerEnvironment(const LaunchOptions& options, int local_rank,
                                           int restart_count, const std::vector<std::string>& base);

// Runs the workers to completion under supervision and returns the launcher's exit code:
// 0 when all workers succeeded, kWorkerFailureExitCode when they failed with no restart
// left, 128 + signal when the launcher was interrupted by SIGINT or SIGTERM. Worker output
// goes to the launcher's stdout/stderr; the launcher's own messages go to stderr prefixed
// "launch: ". An error status means the launcher itself could not work (invalid options, no
// pipes or processes left); workers it had started are stopped first. Must not run
// concurrently with itself: it installs process-wide signal handlers.
absl::StatusOr<int> RunWorkers(const LaunchOptions& options);

}  // namespace vision::distributed::launch

#endif  // VISION_DISTRIBUTED_LAUNCH_LAUNCHER_H_
