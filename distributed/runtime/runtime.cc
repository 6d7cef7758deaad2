#include "distributed/runtime/runtime.h"

#include <chrono>
#include <cstdlib>
#include <cstring>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "distributed/process_group/peer_watchdog.h"
#include "distributed/process_group/process_group.h"

namespace vision::distributed::runtime {
namespace {

template <typename F>
absl::Status Collective(const char* what, F&& f) {
  try {
    f();
    return absl::OkStatus();
  } catch (const c10::Error& e) {
    return absl::UnavailableError(absl::StrCat(
        what, " failed (a peer crashed, stalled past distributed.timeout_seconds, or the "
              "network broke): ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(what, " failed: ", e.what()));
  }
}

class C10dCollectives : public core::Collectives {
 public:
  C10dCollectives(c10::intrusive_ptr<c10d::ProcessGroup> group, int rank, int world_size,
                  std::unique_ptr<process_group::PeerWatchdog> watchdog)
      : group_(std::move(group)),
        rank_(rank),
        world_size_(world_size),
        watchdog_(std::move(watchdog)) {}

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }

  absl::Status AllReduceSum(std::vector<at::Tensor>& tensors) override {
    return Collective("all-reduce", [&] {
      for (at::Tensor& t : tensors) {
        std::vector<at::Tensor> one{t};
        group_->allreduce(one)->wait();
      }
    });
  }

  absl::Status Broadcast(std::vector<at::Tensor>& tensors, int root) override {
    if (root != 0) return absl::InvalidArgumentError("only broadcasts from rank 0 are supported");
    return process_group::BroadcastTensors(*group_, tensors);
  }

  absl::StatusOr<std::vector<std::string>> AllGather(const std::string& value) override {
    std::vector<std::string> result(world_size_);
    VISION_RETURN_IF_ERROR(Collective("all-gather", [&] {
      // Lengths first, then the bytes padded to the longest.
      std::vector<at::Tensor> length{at::tensor({static_cast<int64_t>(value.size())}, at::kLong)};
      std::vector<std::vector<at::Tensor>> lengths(1);
      for (int r = 0; r < world_size_; ++r) lengths[0].push_back(at::empty({1}, at::kLong));
      group_->allgather(lengths, length)->wait();
      int64_t longest = 1;
      for (const at::Tensor& l : lengths[0]) longest = std::max(longest, l.item<int64_t>());
      std::vector<at::Tensor> bytes{at::zeros({longest}, at::kByte)};
      std::memcpy(bytes[0].data_ptr(), value.data(), value.size());
      std::vector<std::vector<at::Tensor>> gathered(1);
      for (int r = 0; r < world_size_; ++r) gathered[0].push_back(at::empty({longest}, at::kByte));
      group_->allgather(gathered, bytes)->wait();
      for (int r = 0; r < world_size_; ++r) {
        result[r].assign(static_cast<const char*>(gathered[0][r].data_ptr()),
                         static_cast<size_t>(lengths[0][r].item<int64_t>()));
      }
    }));
    return result;
  }

  absl::Status Barrier() override {
    return Collective("barrier", [&] { group_->barrier()->wait(); });
  }

  c10::intrusive_ptr<c10d::ProcessGroup> group() const override { return group_; }

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  int rank_;
  int world_size_;
  std::unique_ptr<process_group::PeerWatchdog> watchdog_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<core::Collectives>> JoinJob(const env::DistributedEnv& env,
                                                           const core::TrainPipelineConfig& config) {
  if (env.world_size <= 1) return std::unique_ptr<core::Collectives>(new core::SingleProcess());
  process_group::ProcessGroupOptions options;
  options.rank = env.rank;
  options.world_size = env.world_size;
  options.master_addr = env.master_addr;
  options.master_port = env.master_port;
  const bool cuda = config.device().rfind("cuda", 0) == 0;
  switch (config.distributed().backend()) {
    case core::DistributedConfig::GLOO:
      options.backend = "gloo";
      break;
    case core::DistributedConfig::NCCL:
      options.backend = "nccl";
      break;
    case core::DistributedConfig::SHM:
      options.backend = "shm";
      break;
    default:
      options.backend = cuda ? "nccl" : "gloo";
  }
  options.timeout = std::chrono::seconds(config.distributed().timeout_seconds());
  options.multi_node = env.world_size != env.local_world_size;
  options.local_world_size = env.local_world_size;
  options.restart_count = env.restart_count;
  VISION_ASSIGN_OR_RETURN(c10::intrusive_ptr<c10d::ProcessGroup> group,
                          process_group::CreateProcessGroup(options));
  // A rank that stops responding is named within three quarters of the timeout (the
  // collectives' own timeout would fail later and anonymously).
  process_group::PeerWatchdogOptions watch;
  watch.rank = env.rank;
  watch.world_size = env.world_size;
  watch.master_addr = env.master_addr;
  watch.master_port = env.master_port;
  const char* agent_store = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  if (agent_store != nullptr && std::string(agent_store) == "True") {
    watch.store_host = "torchrun's agent";
  }
  const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
  watch.key_prefix = absl::StrCat("vision/heartbeat/", restart == nullptr ? "0" : restart, "/");
  process_group::SetWatchdogTimes(options.timeout, &watch);
  VISION_ASSIGN_OR_RETURN(std::unique_ptr<process_group::PeerWatchdog> watchdog,
                          process_group::PeerWatchdog::Start(std::move(watch)));
  return std::unique_ptr<core::Collectives>(
      new C10dCollectives(std::move(group), env.rank, env.world_size, std::move(watchdog)));
}

}  // namespace vision::distributed::runtime
