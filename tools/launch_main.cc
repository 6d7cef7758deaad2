// torchrun-compatible launcher; see launcher.h for the supervision rules.
//
//   launch --nproc_per_node=4 [--nnodes=2 --node_rank=0 --master_addr=host0]
//          [--max_restarts=3] -- bazel-bin/tools/train --config=configs/dbnet.pbtxt
//
// Exit code: 0 when every worker succeeded; 1 when workers failed and no restart was left
// (a summary on stderr names each failed rank and its exit code or signal); 128 + N when the
// launcher got signal N (SIGINT -> 130, SIGTERM -> 143); 2 for invalid flags or when the
// launcher itself could not start the workers.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "distributed/launch/launcher.h"

ABSL_FLAG(int, nproc_per_node, 1, "Worker processes on this node, usually one per GPU.");
ABSL_FLAG(int, nnodes, 1, "Nodes in the job; each runs its own launcher.");
ABSL_FLAG(int, node_rank, 0, "This node's index in 0..nnodes-1.");
ABSL_FLAG(std::string, master_addr, "127.0.0.1",
          "Host of node 0, where rank 0 serves the rendezvous store.");
ABSL_FLAG(int, master_port, 29500,
          "Port of the rendezvous store on --master_addr; 0 picks a free port (single node "
          "only, like torchrun --standalone).");
ABSL_FLAG(int, max_restarts, 0,
          "How often the local worker group is restarted after a failure before giving up.");
ABSL_FLAG(int, monitor_interval_ms, 100, "How often worker exits are checked.");
ABSL_FLAG(int, grace_period_ms, 5000,
          "Time workers get to exit after SIGTERM/SIGINT before they are killed.");

namespace {

// A port that was free a moment ago on loopback (the kernel's choice for port 0).
int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(addr);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Starts --nproc_per_node workers with torchrun's environment (RANK, WORLD_SIZE, "
      "LOCAL_RANK, ...), relays their output and restarts them on failure.\n"
      "Usage: launch [flags] -- COMMAND [ARGS...]");
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);

  vision::distributed::launch::LaunchOptions options;
  options.nproc_per_node = absl::GetFlag(FLAGS_nproc_per_node);
  options.nnodes = absl::GetFlag(FLAGS_nnodes);
  options.node_rank = absl::GetFlag(FLAGS_node_rank);
  options.master_addr = absl::GetFlag(FLAGS_master_addr);
  options.master_port = absl::GetFlag(FLAGS_master_port);
  if (options.master_port == 0) {
    if (options.nnodes != 1) {
      std::fprintf(stderr, "launch: --master_port=0 (pick a free port) needs --nnodes=1: the "
                           "other nodes must know the port. Give a fixed port.\n");
      return 2;
    }
    options.master_port = FreeLoopbackPort();
  }
  options.max_restarts = absl::GetFlag(FLAGS_max_restarts);
  options.monitor_interval = absl::Milliseconds(absl::GetFlag(FLAGS_monitor_interval_ms));
  options.grace_period = absl::Milliseconds(absl::GetFlag(FLAGS_grace_period_ms));
  options.command.assign(positional.begin() + 1, positional.end());

  const absl::StatusOr<int> exit_code = vision::distributed::launch::RunWorkers(options);
  if (!exit_code.ok()) {
    std::fprintf(stderr, "launch: %s\n", std::string(exit_code.status().message()).c_str());
    return 2;
  }
  return *exit_code;
}
