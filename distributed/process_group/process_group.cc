#include "distributed/process_group/process_group.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <utility>

#ifdef VISION_WITH_CUDA
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "distributed/shm/shm_backend.h"

namespace vision::distributed::process_group {
namespace {

bool IsLoopback(const std::string& addr) {
  return addr == "localhost" || addr == "::1" || addr.rfind("127.", 0) == 0;
}

std::string RankKey(int rank) { return absl::StrCat("vision/rendezvous/rank/", rank); }

absl::Status ValidateOptions(const ProcessGroupOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "process group: rank ", options.rank, " is outside [0, world_size=", options.world_size,
        "); check RANK and WORLD_SIZE as set by the launcher"));
  }
  if (options.master_port <= 0 || options.master_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "process group: master_port ", options.master_port, " is not a TCP port; set MASTER_PORT"));
  }
  if (options.backend != "gloo" && options.backend != "nccl" && options.backend != "shm") {
    return absl::InvalidArgumentError(
        absl::StrCat("process group: unknown backend '", options.backend,
                     "'; use \"gloo\" (CPU), \"shm\" (CPU, shared memory within a node) or "
                     "\"nccl\" (CUDA)"));
  }
#ifndef VISION_WITH_CUDA
  if (options.backend == "nccl") {
    return absl::FailedPreconditionError(
        "process group: backend \"nccl\" needs a LibTorch with CUDA (this build has none); use "
        "\"gloo\" or rebuild with --repo_env=LIBTORCH_HOME pointing at a CUDA LibTorch");
  }
#endif
  if (options.timeout.count() <= 0) {
    return absl::InvalidArgumentError("process group: timeout must be positive");
  }
  return absl::OkStatus();
}

// Every rank announces itself and waits for all others, so that a rank that never started is
// reported by name instead of surfacing as an anonymous socket timeout inside the backend.
absl::Status Rendezvous(c10d::Store& store, const ProcessGroupOptions& options) {
  std::vector<std::string> keys;
  for (int r = 0; r < options.world_size; ++r) keys.push_back(RankKey(r));
  try {
    store.set(keys[options.rank], std::vector<uint8_t>{1});
    store.wait(keys, options.timeout);
    return absl::OkStatus();
  } catch (const std::exception& e) {
    std::vector<int> missing;
    try {
      for (int r = 0; r < options.world_size; ++r) {
        if (!store.check({keys[r]})) missing.push_back(r);
      }
      // Every key arrived just as the wait gave up: the rendezvous did complete.
      if (missing.empty()) return absl::OkStatus();
      const std::string diagnosed_key = "vision/rendezvous/diagnosed";
      if (options.rank == 0) {
        // Rank 0 hosts the store: keep it up until the other ranks that joined have read which
        // ranks are missing (they time out slightly later, as they started later), or for at
        // most another timeout.
        const int64_t others_present =
            options.world_size - 1 - static_cast<int64_t>(missing.size());
        const auto give_up = std::chrono::steady_clock::now() + options.timeout;
        while (store.add(diagnosed_key, 0) < others_present &&
               std::chrono::steady_clock::now() < give_up) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      } else {
        store.add(diagnosed_key, 1);
      }
    } catch (const std::exception&) {
      // The store itself is gone (rank 0 exited); only the original error is known.
      return absl::DeadlineExceededError(absl::StrCat(
          "process group: rank ", options.rank, " lost the rendezvous store at ",
          options.master_addr, ":", options.master_port, " (hosted by rank 0): ", e.what()));
    }
    return absl::DeadlineExceededError(absl::StrCat(
        "process group: rank(s) ", absl::StrJoin(missing, ", "), " of ", options.world_size,
        " did not join the rendezvous at ", options.master_addr, ":", options.master_port,
        " within ", options.timeout.count(), " ms (seen from rank ", options.rank,
        "); check that every rank was started with the same MASTER_ADDR/MASTER_PORT and "
        "WORLD_SIZE and look at the missing ranks' logs"));
  }
}

c10::intrusive_ptr<c10d::Backend> MakeGlooBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                                  const ProcessGroupOptions& options,
                                                  const std::string& prefix = "gloo") {
  auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.timeout);
  const bool local = !options.multi_node && IsLoopback(options.master_addr);
  // GLOO_SOCKET_IFNAME picks the network interface across nodes, as in PyTorch (the host name
  // may resolve to an address the other nodes cannot reach).
  const char* interface = std::getenv("GLOO_SOCKET_IFNAME");
  if (local) {
    gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  } else if (interface != nullptr && *interface != '\0') {
    gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(interface));
  } else {
    gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(prefix, store);
  return c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, options.rank, options.world_size,
                                                     gloo_options);
}

// A ProcessGroup dispatches each collective to the Backend of its tensors' device. Every group
// has Gloo for CPU tensors (config agreement, metric sums, parameter broadcast of CPU models);
// an NCCL group adds NCCL for CUDA tensors, as PyTorch's "cpu:gloo,cuda:nccl" does.
// A "shm" group's CPU backend wraps its Gloo backend (see distributed/shm/shm_backend.h).
absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> MakeGroup(
    const c10::intrusive_ptr<c10d::Store>& store, const ProcessGroupOptions& options) {
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, options.rank, options.world_size);
  auto gloo = MakeGlooBackend(store, options);
  if (options.backend == "shm") {
    shm::ShmBackendOptions shm_options;
    shm_options.rank = options.rank;
    shm_options.world_size = options.world_size;
    shm_options.local_world_size = options.local_world_size;
    shm_options.master_port = options.master_port;
    shm_options.restart_count = options.restart_count;
    shm_options.timeout = options.timeout;
    const auto make_gloo = [&](const std::string& prefix, int rank, int size) {
      ProcessGroupOptions sub = options;
      sub.rank = rank;
      sub.world_size = size;
      return MakeGlooBackend(store, sub, prefix);
    };
    VISION_ASSIGN_OR_RETURN(auto backend,
                            shm::CreateShmBackend(store, shm_options, gloo, make_gloo));
    group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::CUSTOM, backend);
    group->setDefaultBackend(c10d::ProcessGroup::BackendType::CUSTOM);
    return group;
  }
  group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
  group->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
#ifdef VISION_WITH_CUDA
  if (options.backend == "nccl") {
    auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
    nccl_options->timeout = options.timeout;
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("nccl", store);
    auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, options.rank,
                                                            options.world_size, nccl_options);
    group->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, nccl);
    group->setDefaultBackend(c10d::ProcessGroup::BackendType::NCCL);
  }
#endif
  return group;
}

// Runs `fn` (which issues collectives) and turns a c10::Error or Gloo exception into a status.
template <typename Fn>
absl::Status Guarded(const char* what, Fn&& fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, " failed: ", e.what()));
  }
}

// Groups tensors by dtype so each group travels as one flat buffer.
std::map<at::ScalarType, std::vector<at::Tensor>> ByDtype(const std::vector<at::Tensor>& tensors) {
  std::map<at::ScalarType, std::vector<at::Tensor>> groups;
  for (const at::Tensor& t : tensors) {
    if (t.defined() && t.numel() > 0) groups[t.scalar_type()].push_back(t);
  }
  return groups;
}

at::Tensor Flatten(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const at::Tensor& t : tensors) flat.push_back(t.detach().reshape({-1}));
  return at::cat(flat);
}

void Unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& tensors) {
  int64_t offset = 0;
  for (const at::Tensor& t : tensors) {
    const int64_t n = t.numel();
    t.detach().copy_(flat.narrow(0, offset, n).view(t.sizes()));
    offset += n;
  }
}

}  // namespace

ProcessGroupOptions OptionsFromEnv(const env::DistributedEnv& env, const std::string& backend,
                                   std::chrono::milliseconds timeout) {
  ProcessGroupOptions options;
  options.rank = env.rank;
  options.world_size = env.world_size;
  options.master_addr = env.master_addr;
  options.master_port = env.master_port;
  options.backend = backend;
  options.timeout = timeout;
  options.multi_node = env.local_world_size < env.world_size || !IsLoopback(env.master_addr);
  options.local_world_size = env.local_world_size;
  options.restart_count = env.restart_count;
  return options;
}

absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> CreateProcessGroup(
    const ProcessGroupOptions& options) {
  VISION_RETURN_IF_ERROR(ValidateOptions(options));
  c10::intrusive_ptr<c10d::Store> store;
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<std::uint16_t>(options.master_port);
    // Under torchrun the agent already serves a store on MASTER_PORT and says so; rank 0 then
    // joins it as a client like the others (LibTorch would otherwise log a failed bind first).
    const char* agent_store = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
    const bool use_agent_store = agent_store != nullptr && std::string(agent_store) == "True";
    store_options.isServer = options.rank == 0 && !use_agent_store;
    // Waiting for workers inside the constructor would hide which rank is missing; the
    // rendezvous below does the waiting and names them.
    store_options.waitWorkers = false;
    store_options.timeout = options.timeout;
    store = c10::make_intrusive<c10d::TCPStore>(options.master_addr, store_options);
  } catch (const std::exception& e) {
    if (options.rank == 0) {
      return absl::UnavailableError(absl::StrCat(
          "process group: rank 0 could not host the rendezvous store on port ", options.master_port,
          ": ", e.what(), ". Another job may use this port; pick a free MASTER_PORT"));
    }
    return absl::DeadlineExceededError(absl::StrCat(
        "process group: rank ", options.rank,
        " could not reach the rendezvous store of rank 0 "
        "at ",
        options.master_addr, ":", options.master_port, " within ", options.timeout.count(),
        " ms: ", e.what(),
        ". Rank 0 did not join; check that it runs and that MASTER_ADDR/MASTER_PORT match"));
  }
  VISION_RETURN_IF_ERROR(Rendezvous(*store, options));
  try {
    return MakeGroup(store, options);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("process group: creating the ", options.backend,
                                            " backend on rank ", options.rank,
                                            " failed: ", e.what()));
  }
}

absl::Status CheckConfigAgreement(c10d::ProcessGroup& group, const std::string& fingerprint) {
  const int world = group.getSize();
  std::vector<std::string> fingerprints(world);
  VISION_RETURN_IF_ERROR(Guarded("config agreement (all-gather of fingerprints)", [&] {
    // Fingerprints may differ in length: agree on the longest first, then gather padded bytes.
    std::vector<at::Tensor> length_in = {
        at::full({1}, static_cast<int64_t>(fingerprint.size()), at::kLong)};
    std::vector<std::vector<at::Tensor>> length_out(1);
    for (int r = 0; r < world; ++r) length_out[0].push_back(at::zeros({1}, at::kLong));
    group.allgather(length_out, length_in)->wait();
    int64_t max_length = 1;
    std::vector<int64_t> lengths(world);
    for (int r = 0; r < world; ++r) {
      lengths[r] = length_out[0][r].item<int64_t>();
      max_length = std::max(max_length, lengths[r]);
    }
    at::Tensor bytes = at::zeros({max_length}, at::kByte);
    std::copy(fingerprint.begin(), fingerprint.end(), bytes.data_ptr<uint8_t>());
    std::vector<at::Tensor> bytes_in = {bytes};
    std::vector<std::vector<at::Tensor>> bytes_out(1);
    for (int r = 0; r < world; ++r) bytes_out[0].push_back(at::zeros({max_length}, at::kByte));
    group.allgather(bytes_out, bytes_in)->wait();
    for (int r = 0; r < world; ++r) {
      const auto* data = reinterpret_cast<const char*>(bytes_out[0][r].data_ptr<uint8_t>());
      fingerprints[r].assign(data, lengths[r]);
    }
  }));
  std::map<std::string, std::vector<int>> ranks_by_fingerprint;
  for (int r = 0; r < world; ++r) ranks_by_fingerprint[fingerprints[r]].push_back(r);
  if (ranks_by_fingerprint.size() == 1) return absl::OkStatus();
  std::vector<std::string> parts;
  for (const auto& [print, ranks] : ranks_by_fingerprint) {
    parts.push_back(absl::StrCat("rank(s) ", absl::StrJoin(ranks, ", "), ": '", print, "'"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "config mismatch between ranks (seen from rank ", group.getRank(),
      "): ", absl::StrJoin(parts, "; "),
      ". Every rank must run the same config and overrides; compare the command lines"));
}

absl::Status BroadcastTensors(c10d::ProcessGroup& group, const std::vector<at::Tensor>& tensors) {
  return Guarded("broadcast of parameters from rank 0", [&] {
    at::NoGradGuard no_grad;
    for (const auto& [dtype, members] : ByDtype(tensors)) {
      std::vector<at::Tensor> flat = {Flatten(members)};
      group.broadcast(flat)->wait();
      Unflatten(flat[0], members);
    }
  });
}

absl::Status BroadcastParameters(c10d::ProcessGroup& group, torch::nn::Module& module) {
  std::vector<at::Tensor> tensors = module.parameters();
  for (const at::Tensor& buffer : module.buffers()) tensors.push_back(buffer);
  return BroadcastTensors(group, tensors);
}

absl::Status AllReduceMean(c10d::ProcessGroup& group, const std::vector<at::Tensor>& tensors) {
  return Guarded("all-reduce (mean)", [&] {
    at::NoGradGuard no_grad;
    for (const auto& [dtype, members] : ByDtype(tensors)) {
      std::vector<at::Tensor> flat = {Flatten(members)};
      group.allreduce(flat)->wait();
      flat[0].div_(group.getSize());
      Unflatten(flat[0], members);
    }
  });
}

absl::StatusOr<std::vector<double>> SumAcrossRanks(c10d::ProcessGroup& group,
                                                   const std::vector<double>& values) {
  const int64_t n = static_cast<int64_t>(values.size());
  std::vector<double> sum(values.size());
  VISION_RETURN_IF_ERROR(Guarded("sum across ranks", [&] {
    // MAX of (n, -n) yields the longest and the shortest length in one collective.
    std::vector<at::Tensor> lengths = {at::tensor({n, -n}, at::kLong)};
    c10d::AllreduceOptions max_options;
    max_options.reduceOp = c10d::ReduceOp::MAX;
    group.allreduce(lengths, max_options)->wait();
    const int64_t longest = lengths[0][0].item<int64_t>();
    const int64_t shortest = -lengths[0][1].item<int64_t>();
    if (longest != shortest) {
      throw std::runtime_error(
          absl::StrCat("ranks passed different numbers of values (between ", shortest, " and ",
                       longest, "; rank ", group.getRank(), " passed ", n,
                       "); every rank must contribute the same evaluation state"));
    }
    std::vector<at::Tensor> data = {at::tensor(values, at::kDouble)};
    if (n == 0) return;
    group.allreduce(data)->wait();
    std::copy(data[0].data_ptr<double>(), data[0].data_ptr<double>() + n, sum.begin());
  }));
  return sum;
}

}  // namespace vision::distributed::process_group
