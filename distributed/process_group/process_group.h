// Creating a c10d process group with a bounded, diagnosable rendezvous, and the few
// collectives the trainer needs outside gradient communication (initial broadcast, metric
// reduction, config agreement).
//
// Every helper here is a collective: all ranks of the group must call it, in the same order,
// with the same argument shapes, or the group deadlocks until its timeout.
#ifndef VISION_DISTRIBUTED_PROCESS_GROUP_PROCESS_GROUP_H_
#define VISION_DISTRIBUTED_PROCESS_GROUP_PROCESS_GROUP_H_

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "distributed/env/distributed_env.h"

namespace c10d {
class ProcessGroup;
}  // namespace c10d

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace vision::distributed::process_group {

struct ProcessGroupOptions {
  int rank = 0;
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // "gloo" (CPU tensors), "nccl" (CUDA tensors through NCCL; CPU tensors of the same group
  // still go through Gloo; needs a build with VISION_WITH_CUDA) or "shm" (CPU tensors; sum
  // all-reduces through shared memory within a node and Gloo across nodes, the rest through
  // Gloo: see distributed/shm/shm_backend.h).
  std::string backend = "gloo";
  // "shm" only: ranks per node (node n holds ranks [n * local_world_size, ...)), 0 when every
  // rank is on this host, and the launcher's restart count (names the segments).
  int local_world_size = 0;
  int restart_count = 0;
  // Bounds the rendezvous (every rank must join within it) and every later collective.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // Gloo binds its transport to the loopback interface when the job is on one machine (the
  // master address is a loopback address and multi_node is false): no firewall or hostname
  // resolution can then get in the way. Otherwise it binds to the address of this host's name.
  bool multi_node = false;
};

// Options for this process from its launcher's environment. The job spans several machines
// when a node holds fewer processes than the job or the master is not a loopback address.
ProcessGroupOptions OptionsFromEnv(const env::DistributedEnv& env, const std::string& backend,
                                   std::chrono::milliseconds timeout);

// Rank 0 hosts a c10d::TCPStore at master_addr:master_port (under torchrun, whose agent hosts
// it, TORCHELASTIC_USE_AGENT_STORE=True, rank 0 joins as a client too), the other ranks connect.
// Each rank then announces itself under "vision/rendezvous/rank/<r>" and waits for all others;
// when some rank does not join within `timeout` every waiting rank fails with an error that
// lists the missing ranks. Only then is the backend's group created.
absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> CreateProcessGroup(
    const ProcessGroupOptions& options);

// All ranks exchange `fingerprint` (e.g. a hash of the resolved config); a mismatch is an error
// on every rank listing which ranks hold which fingerprint.
absl::Status CheckConfigAgreement(c10d::ProcessGroup& group, const std::string& fingerprint);

// Overwrites `tensors` (parameters and buffers, in the same order on every rank) with rank 0's
// values. Tensors are flattened per dtype so this is one broadcast per dtype.
absl::Status BroadcastTensors(c10d::ProcessGroup& group, const std::vector<at::Tensor>& tensors);

// BroadcastTensors of module.parameters() followed by module.buffers(). Call it before
// attaching a CommStrategy so every rank starts from identical weights.
absl::Status BroadcastParameters(c10d::ProcessGroup& group, torch::nn::Module& module);

// Replaces each tensor by its mean over ranks (one flattened all-reduce per dtype).
absl::Status AllReduceMean(c10d::ProcessGroup& group, const std::vector<at::Tensor>& tensors);

// Element-wise sum of `values` over ranks, returned on every rank: the state of a distributed
// evaluation (counts, sums of errors) is summed this way. Every rank must pass the same length;
// a different length is an error on every rank rather than a hang.
absl::StatusOr<std::vector<double>> SumAcrossRanks(c10d::ProcessGroup& group,
                                                   const std::vector<double>& values);

}  // namespace vision::distributed::process_group

#endif  // VISION_DISTRIBUTED_PROCESS_GROUP_PROCESS_GROUP_H_
