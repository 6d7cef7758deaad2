// Step time of data-parallel training of a small conv net, per gradient communication strategy,
// at world size 1 and 2 (one process per rank, forked here), measured side by side in one run:
// on CPU with Gloo, or on GPUs with NCCL (--device=cuda --backend=nccl, one GPU per rank).
// Prints ms/step (mean over the timed steps, rank 0's clock; every rank waits for the others in
// the collectives) and the parameter checksum after training, which must agree between the exact
// strategies of a world size.
//
//   bazel run -c opt //distributed/strategies:comm_benchmark -- --steps=20 --batch=8
//   comm_benchmark --rank=0 --world=1 --device=cuda --backend=nccl   (one GPU, NCCL's path)
//
// "none" trains each rank on its own (no communication): the compute-only baseline.
// "collectives" runs no model at all: each step it all-reduces buffers of the bucketed
// strategy's bucket sizes, launched together and then awaited, i.e. the time of the collectives
// alone, which the communication overhead of a strategy is compared with. With one rank the
// strategies send nothing (one gradient is its own average): "collectives" is then what runs
// the backend's all-reduce.
//
// PyTorch's DDP is compared as users run it, from Python (benchmarks/ddp_peer.py, driven by
// benchmarks/comm_vs_ddp.sh), not by linking its C++ c10d::Reducer here.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/DeviceGuard.h>
#include <sys/resource.h>
#include <torch/cuda.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>
#include <torch/utils.h>

#include <chrono>
#include <functional>
#include <iomanip>
#include <iostream>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/host_memory.h"
#include "core/profile_steps.h"
#include "core/trace.h"
#include "distributed/process_group/multiprocess_testing.h"
#include "distributed/process_group/process_group.h"
#include "distributed/strategies/strategies.h"

ABSL_FLAG(std::string, model, "small",
          "small: the ~1 M-parameter conv net below; resnet18: torchvision's ResNet-18 (11.7 M "
          "parameters, 1000 classes), e.g. at --image_size=224");
ABSL_FLAG(int, steps, 20, "timed steps per configuration");
ABSL_FLAG(int, warmup, 3, "untimed steps first");
ABSL_FLAG(int, batch, 8, "images per rank and step");
ABSL_FLAG(int, image_size, 32, "square input size");
ABSL_FLAG(double, bucket_cap_mb, 1.0, "bucket capacity of the bucketed strategies");
ABSL_FLAG(int, threads, 1, "intra-op threads per rank");
ABSL_FLAG(std::string, configs, "none,collectives,allreduce,bucketed,fp16_compress,bf16_compress",
          "comma-separated configurations to time");
ABSL_FLAG(int, rank, -1,
          "-1: fork every rank here, on loopback. >= 0: be this one rank of --world ranks, "
          "started separately (e.g. one per network namespace), rendezvous at --master_addr");
ABSL_FLAG(int, world, 2, "with --rank: the number of ranks");
ABSL_FLAG(std::string, worlds, "1,2", "without --rank: the world sizes to run, e.g. 2");
ABSL_FLAG(std::string, master_addr, "127.0.0.1", "with --rank: rank 0's address");
ABSL_FLAG(int, master_port, 29600,
          "with --rank: the first of consecutive ports, one per configuration and repeat");
ABSL_FLAG(std::string, device, "cpu",
          "cpu, or cuda: rank r trains on cuda:r (NCCL allows one rank per GPU)");
ABSL_FLAG(std::string, backend, "gloo",
          "gloo; shm (shared memory within the node, distributed/shm); or nccl: NCCL for the CUDA "
          "tensors of --device=cuda (CPU tensors take Gloo)");
ABSL_FLAG(
    std::string, trace_dir, "",
    "non-empty: after the timed steps, --trace_steps more steps are traced (core/trace.h) and "
    "each rank writes <trace_dir>/<configuration>_trace_rank<k>.json (Chrome Trace Event "
    "Format: open in ui.perfetto.dev or chrome://tracing)");
ABSL_FLAG(int, trace_steps, 5, "with --trace_dir: the number of traced steps");
ABSL_FLAG(std::string, profile_dir, "",
          "non-empty: after the timed (and traced) steps, --profile_steps more steps run under "
          "the PyTorch (Kineto) profiler with input shapes, and each rank writes "
          "<profile_dir>/<configuration>_world<N>_profile_rank<k>.json, the format of "
          "torch.profiler's export_chrome_trace (benchmarks/op_table.py compares two of them)");
ABSL_FLAG(bool, communicate_at_world_one, false,
          "the bucketed strategies all-reduce their buckets even at world size 1 "
          "(BucketedOptions.communicate_at_world_one): on one GPU, NCCL's path and, with "
          "--trace_dir, whether its bucket all-reduces overlap backward");
ABSL_FLAG(bool, retain_host_memory, true,
          "keep freed host memory for reuse, as //tools:train does (core/host_memory.h); false: "
          "glibc's malloc defaults, under which every step faults its activations in again");
ABSL_FLAG(bool, list_parameters, false,
          "print the model's parameters and buffers (name, shape) and their element count, then "
          "exit: compare with ddp_peer.py --list_parameters");
ABSL_FLAG(int, profile_steps, 2, "with --profile_dir: the number of profiled steps");
ABSL_FLAG(int, repeats, 1,
          "sweeps over all configurations; interleaving repeats spreads drifting machine load "
          "over all of them (take the median per line)");

namespace vision::distributed::strategies {
namespace {

// What is trained: images in, `num_classes` scores out.
struct BenchModel : torch::nn::Module {
  virtual at::Tensor forward(const at::Tensor& x) = 0;
  virtual int64_t num_classes() const = 0;
};

// ~1.0 M parameters (4 MiB of float gradients): several 1 MiB buckets.
struct BenchNet : BenchModel {
  BenchNet() {
    conv1 =
        register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 64, 3).padding(1)));
    conv2 = register_module(
        "conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(64, 128, 3).stride(2).padding(1)));
    conv3 = register_module(
        "conv3", torch::nn::Conv2d(torch::nn::Conv2dOptions(128, 256, 3).stride(2).padding(1)));
    conv4 = register_module("conv4",
                            torch::nn::Conv2d(torch::nn::Conv2dOptions(256, 256, 3).padding(1)));
    fc = register_module("fc", torch::nn::Linear(256, 10));
  }
  int64_t num_classes() const override { return 10; }
  at::Tensor forward(const at::Tensor& x) override {
    at::Tensor h = at::relu(conv1->forward(x));
    h = at::relu(conv2->forward(h));
    h = at::relu(conv3->forward(h));
    h = at::relu(conv4->forward(h));
    return fc->forward(h.mean({2, 3}));
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr}, conv4{nullptr};
  torch::nn::Linear fc{nullptr};
};

torch::nn::Conv2d Conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

// torchvision's BasicBlock, its parameters registered in torchvision's order.
struct BasicBlock : torch::nn::Module {
  BasicBlock(int64_t in, int64_t out, int64_t stride) {
    conv1 = register_module("conv1", Conv(in, out, 3, stride));
    bn1 = register_module("bn1", torch::nn::BatchNorm2d(out));
    conv2 = register_module("conv2", Conv(out, out, 3, 1));
    bn2 = register_module("bn2", torch::nn::BatchNorm2d(out));
    if (stride != 1 || in != out) {
      downsample = register_module(
          "downsample",
          torch::nn::Sequential(Conv(in, out, 1, stride), torch::nn::BatchNorm2d(out)));
    }
  }
  // As torchvision's: ReLU(inplace=True) and `out += identity`. Out-of-place, each step
  // allocated 17 more activation-sized tensors (~37 MiB at 224x224, batch 4), which glibc maps
  // and faults in again every step.
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = bn1->forward(conv1->forward(x));
    at::relu_(h);
    h = bn2->forward(conv2->forward(h));
    h += downsample ? downsample->forward(x) : x;
    return at::relu_(h);
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  torch::nn::Sequential downsample{nullptr};
};

// torchvision.models.resnet18: the same parameters and buffers (names, shapes, order; 11.7 M
// parameters, --list_parameters prints them as ddp_peer.py's does) and the same operators per
// step (--profile_dir, benchmarks/op_table.py).
struct ResNet18 : BenchModel {
  ResNet18() {
    conv1 = register_module("conv1", Conv(3, 64, 7, 2));
    bn1 = register_module("bn1", torch::nn::BatchNorm2d(64));
    int64_t in = 64;
    for (int stage = 0; stage < 4; ++stage) {
      const int64_t out = 64 << stage;
      auto layer = torch::nn::Sequential();
      for (int block = 0; block < 2; ++block) {
        layer->push_back(std::make_shared<BasicBlock>(in, out, stage > 0 && block == 0 ? 2 : 1));
        in = out;
      }
      layers.push_back(register_module(absl::StrCat("layer", stage + 1), layer));
    }
    fc = register_module("fc", torch::nn::Linear(512, 1000));
  }
  int64_t num_classes() const override { return 1000; }
  at::Tensor forward(const at::Tensor& x) override {
    at::Tensor h = bn1->forward(conv1->forward(x));
    at::relu_(h);
    h = at::max_pool2d(h, 3, 2, 1);
    for (auto& layer : layers) h = layer->forward(h);
    return fc->forward(at::adaptive_avg_pool2d(h, {1, 1}).flatten(1));
  }
  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  std::vector<torch::nn::Sequential> layers;
  torch::nn::Linear fc{nullptr};
};

std::shared_ptr<BenchModel> MakeModel() {
  if (absl::GetFlag(FLAGS_model) == "resnet18") return std::make_shared<ResNet18>();
  return std::make_shared<BenchNet>();
}

google::protobuf::Any StrategyOptions(const std::string& name) {
  google::protobuf::Any any;
  if (name == "allreduce") return any;
  BucketedOptions options;
  options.set_bucket_cap_mb(absl::GetFlag(FLAGS_bucket_cap_mb));
  options.set_communicate_at_world_one(absl::GetFlag(FLAGS_communicate_at_world_one));
  any.PackFrom(options);
  return any;
}

// The per-step hooks of one way of communicating.
struct Communicator {
  std::function<void()> before_backward = [] {};
  std::function<absl::Status()> after_backward = [] { return absl::OkStatus(); };
  std::shared_ptr<void> keep_alive;
};

absl::StatusOr<Communicator> MakeCommunicator(const std::string& name, BenchModel& net,
                                              c10::intrusive_ptr<c10d::ProcessGroup> group) {
  Communicator comm;
  if (name == "none") return comm;
  auto made = core::CommStrategyRegistry::Get().Create(name, StrategyOptions(name));
  if (!made.ok()) return made.status();
  std::shared_ptr<core::CommStrategy> strategy = std::move(made).value();
  if (auto s = strategy->Attach(net.parameters(), {}, group); !s.ok()) return s;
  comm.before_backward = [strategy] { strategy->PrepareBackward(true); };
  comm.after_backward = [strategy] { return strategy->FinishBackward(); };
  comm.keep_alive = strategy;
  return comm;
}

// The device of `rank`'s tensors.
c10::Device RankDevice(int rank) {
  return absl::GetFlag(FLAGS_device) == "cuda" ? c10::Device(c10::kCUDA, rank)
                                               : c10::Device(c10::kCPU);
}

// CUDA kernels and NCCL collectives run asynchronously: wait for the device before reading a
// clock.
void Synchronize(const c10::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// CPU time of this process (every thread: compute, autograd, Gloo's workers), in ms. On a
// machine shared with other jobs the wall clock mostly measures the others; CPU time per step
// still measures the work a configuration adds.
double ProcessCpuMs() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1e3 +
         (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e3;
}

// The part of ProcessCpuMs spent in the kernel (page faults, system calls), in ms.
double ProcessSysMs() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_stime.tv_sec * 1e3 + usage.ru_stime.tv_usec / 1e3;
}

// Page faults of this process so far (minor: a fresh page mapped, e.g. memory the allocator got
// from the kernel again). Unlike time, the count per step does not depend on the machine's load.
int64_t ProcessPageFaults() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt + usage.ru_majflt;
}

absl::Status TimeCollectives(std::vector<at::Tensor>& buffers,
                             const c10::intrusive_ptr<c10d::ProcessGroup>& group, int rank,
                             int world) {
  const c10::Device device = RankDevice(rank);
  const int warmup = absl::GetFlag(FLAGS_warmup);
  const int steps = absl::GetFlag(FLAGS_steps);
  std::chrono::steady_clock::time_point start;
  for (int step = 0; step < warmup + steps; ++step) {
    if (step == warmup) {
      std::vector<at::Tensor> token = {at::zeros({1}, device)};
      group->allreduce(token)->wait();
      Synchronize(device);
      start = std::chrono::steady_clock::now();
    }
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (at::Tensor& buffer : buffers) {
      std::vector<at::Tensor> tensors = {buffer};
      works.push_back(group->allreduce(tensors));
    }
    for (auto& work : works) work->wait();
  }
  Synchronize(device);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() /
      steps;
  if (rank == 0) {
    std::cout << std::left << std::setw(14) << "collectives"
              << " world " << world << std::right << std::fixed << std::setprecision(1)
              << std::setw(9) << ms << " ms/step   " << buffers.size() << " buckets" << std::endl;
  }
  return absl::OkStatus();
}

// Buffers shaped like the bucketed strategy's buckets for `net`.
absl::StatusOr<std::vector<at::Tensor>> BucketBuffers(
    BenchModel& net, c10::intrusive_ptr<c10d::ProcessGroup> group) {
  BucketedOptions options;
  options.set_bucket_cap_mb(absl::GetFlag(FLAGS_bucket_cap_mb));
  auto strategy = BucketedStrategy::Create(options);
  if (!strategy.ok()) return strategy.status();
  const std::vector<at::Tensor> params = net.parameters();
  if (auto s = (*strategy)->Attach(params, {}, group); !s.ok()) return s;
  std::vector<at::Tensor> buffers;
  for (const std::vector<int>& bucket : (*strategy)->BucketLayout()) {
    int64_t numel = 0;
    for (int i : bucket) numel += params[i].numel();
    buffers.push_back(at::randn({numel}, params.front().device()));
  }
  return buffers;
}

// One configuration's timed steps on a formed group.
absl::Status TrainRank(const std::string& name, int rank, int world, const c10::Device& device,
                       const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  torch::manual_seed(0);
  std::shared_ptr<BenchModel> model = MakeModel();
  BenchModel& net = *model;
  // Initialised on the host and moved: the same weights (and checksums) on every device.
  net.to(device);
  if (name == "collectives") {
    auto buffers = BucketBuffers(net, group);
    if (!buffers.ok()) return buffers.status();
    return TimeCollectives(*buffers, group, rank, world);
  }
  auto comm = MakeCommunicator(name, net, group);
  if (!comm.ok()) return comm.status();
  const int batch = absl::GetFlag(FLAGS_batch);
  const int size = absl::GetFlag(FLAGS_image_size);
  torch::manual_seed(1 + rank);
  const at::Tensor inputs = at::randn({batch, 3, size, size}).to(device);
  const at::Tensor targets = at::randn({batch, net.num_classes()}).to(device);
  const int warmup = absl::GetFlag(FLAGS_warmup);
  const int steps = absl::GetFlag(FLAGS_steps);
  std::chrono::steady_clock::time_point start;
  // Where a step's time goes: forward, backward (with any communication it launches), and
  // the wait for communication after backward. On a GPU each phase ends with a device
  // synchronisation, so that the host's clock sees the phase's kernels finish.
  double forward_ms = 0, backward_ms = 0, wait_ms = 0, cpu_start_ms = 0, sys_start_ms = 0;
  int64_t faults_start = 0;
  namespace trace = core::trace;
  // One training step. With tracing on, its phases become spans of the timeline.
  const auto train_step = [&](bool timed) -> absl::Status {
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t step_us = trace::Enabled() ? trace::NowUs() : 0;
    at::Tensor loss;
    {
      trace::ScopedSpan span("forward", "step");
      loss = (net.forward(inputs) - targets).pow(2).mean();
      comm->before_backward();
      Synchronize(device);
    }
    const auto t1 = std::chrono::steady_clock::now();
    {
      trace::ScopedSpan span("backward", "step");
      loss.backward();
      Synchronize(device);
    }
    const auto t2 = std::chrono::steady_clock::now();
    {
      trace::ScopedSpan span("finish_backward", "step");
      if (auto s = comm->after_backward(); !s.ok()) return s;
      Synchronize(device);
    }
    const auto t3 = std::chrono::steady_clock::now();
    if (timed) {
      forward_ms += std::chrono::duration<double, std::milli>(t1 - t0).count();
      backward_ms += std::chrono::duration<double, std::milli>(t2 - t1).count();
      wait_ms += std::chrono::duration<double, std::milli>(t3 - t2).count();
    }
    {
      trace::ScopedSpan span("optimizer", "step");
      at::NoGradGuard no_grad;
      for (at::Tensor& p : net.parameters()) {
        p.sub_(p.grad(), 0.01);
        p.mutable_grad().zero_();
      }
    }
    if (trace::Enabled()) {
      trace::Record("step", "step", step_us, trace::NowUs(), trace::NamedLane("steps"));
    }
    return absl::OkStatus();
  };
  for (int step = 0; step < warmup + steps; ++step) {
    if (step == warmup) {
      // Start the clock together.
      std::vector<at::Tensor> token = {at::zeros({1}, device)};
      group->allreduce(token)->wait();
      Synchronize(device);
      start = std::chrono::steady_clock::now();
      cpu_start_ms = ProcessCpuMs();
      sys_start_ms = ProcessSysMs();
      faults_start = ProcessPageFaults();
    }
    if (auto s = train_step(step >= warmup); !s.ok()) return s;
  }
  Synchronize(device);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() /
      steps;
  const double cpu_ms = (ProcessCpuMs() - cpu_start_ms) / steps;
  const double sys_ms = (ProcessSysMs() - sys_start_ms) / steps;
  const int64_t faults = (ProcessPageFaults() - faults_start) / steps;
  double checksum = 0;
  for (const at::Tensor& p : net.parameters()) checksum += p.sum().item<double>();
  if (rank == 0) {
    std::cout << std::left << std::setw(14) << name << " world " << world << std::right
              << std::fixed << std::setprecision(1) << std::setw(9) << ms << " ms/step"
              << "   checksum " << std::setprecision(6) << checksum << std::setprecision(1)
              << "   forward " << forward_ms / steps << " backward " << backward_ms / steps
              << " wait " << wait_ms / steps << "   cpu " << cpu_ms << " ms/step (sys " << sys_ms
              << ")   faults " << faults << "/step" << std::endl;
  }
  // Traced steps come after the timed ones, so that the timings are those of tracing off.
  if (const std::string dir = absl::GetFlag(FLAGS_trace_dir); !dir.empty()) {
    trace::Start(rank);
    trace::NameThisThread("main");
    absl::Status status;
    for (int step = 0; step < absl::GetFlag(FLAGS_trace_steps) && status.ok(); ++step) {
      status = train_step(false);
    }
    Synchronize(device);
    trace::Stop();
    if (!status.ok()) return status;
    if (auto s = trace::WriteChromeTrace(
            absl::StrCat(dir, "/", name, "_world", world, "_trace_rank", rank, ".json"));
        !s.ok()) {
      return s;
    }
  }
  if (const std::string dir = absl::GetFlag(FLAGS_profile_dir); !dir.empty()) {
    const absl::Status status = core::ProfileSteps(
        absl::GetFlag(FLAGS_profile_steps), [&] { return train_step(false); },
        absl::StrCat(dir, "/", name, "_world", world, "_profile_rank", rank, ".json"));
    Synchronize(device);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status RunRank(const std::string& name, int rank, int world, int port,
                     const std::string& master_addr = "127.0.0.1") {
  at::set_num_threads(absl::GetFlag(FLAGS_threads));
  const c10::Device device = RankDevice(rank);
  if (device.is_cuda() && rank >= static_cast<int>(torch::cuda::device_count())) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device=cuda: rank ", rank, " needs cuda:", rank, " but ",
                     torch::cuda::device_count(), " GPU(s) are visible"));
  }
  // The current device is the one NCCL binds this rank's communicator to.
  c10::OptionalDeviceGuard device_guard;
  if (device.is_cuda()) device_guard.reset_device(device);
  process_group::ProcessGroupOptions options;
  options.rank = rank;
  options.world_size = world;
  options.master_addr = master_addr;
  options.multi_node = master_addr != "127.0.0.1";
  options.master_port = port;
  options.backend = absl::GetFlag(FLAGS_backend);
  options.timeout = std::chrono::seconds(60);
  auto group = process_group::CreateProcessGroup(options);
  if (!group.ok()) return group.status();
  absl::Status status = TrainRank(name, rank, world, device, *group);
  // NCCL's communicators are torn down here rather than by a destructor at exit.
  (*group)->shutdown();
  return status;
}

int Main() {
  if (const std::string model = absl::GetFlag(FLAGS_model);
      model != "small" && model != "resnet18") {
    std::cerr << "--model: small or resnet18, got '" << model << "'\n";
    return 1;
  }
  if (const std::string device = absl::GetFlag(FLAGS_device); device != "cpu" && device != "cuda") {
    std::cerr << "--device: cpu or cuda, got '" << device << "'\n";
    return 1;
  }
  if (absl::GetFlag(FLAGS_list_parameters)) {
    const std::shared_ptr<BenchModel> model = MakeModel();
    int64_t numel = 0;
    for (const auto& item : model->named_parameters()) {
      std::cout << "parameter " << item.key() << " " << item.value().sizes() << "\n";
      numel += item.value().numel();
    }
    for (const auto& item : model->named_buffers()) {
      std::cout << "buffer " << item.key() << " " << item.value().sizes() << "\n";
    }
    std::cout << "parameter elements " << numel << std::endl;
    return 0;
  }
  // Before any rank is forked: every rank inherits the setting.
  const std::string host_memory = absl::GetFlag(FLAGS_retain_host_memory)
                                      ? core::RetainFreedHostMemory()
                                      : "host memory: glibc's malloc defaults";
  std::cout << absl::GetFlag(FLAGS_model) << ", batch " << absl::GetFlag(FLAGS_batch) << " x 3 x "
            << absl::GetFlag(FLAGS_image_size) << "^2 per rank, " << absl::GetFlag(FLAGS_threads)
            << " thread(s) per rank, bucket cap " << absl::GetFlag(FLAGS_bucket_cap_mb) << " MiB, "
            << absl::GetFlag(FLAGS_steps) << " timed steps, " << absl::GetFlag(FLAGS_device)
            << " with " << absl::GetFlag(FLAGS_backend) << "; " << host_memory << std::endl;
  const std::vector<std::string> configs =
      absl::StrSplit(absl::GetFlag(FLAGS_configs), ',', absl::SkipEmpty());
  int failures = 0;
  if (const int rank = absl::GetFlag(FLAGS_rank); rank >= 0) {
    // One rank of a job whose other ranks run elsewhere: every rank walks the same list.
    const int world = absl::GetFlag(FLAGS_world);
    int port = absl::GetFlag(FLAGS_master_port);
    for (int repeat = 0; repeat < absl::GetFlag(FLAGS_repeats); ++repeat) {
      for (const std::string& name : configs) {
        const absl::Status status =
            RunRank(name, rank, world, port++, absl::GetFlag(FLAGS_master_addr));
        if (status.ok()) continue;
        std::cerr << name << " world " << world << " rank " << rank << ": " << status << "\n";
        ++failures;
      }
    }
    return failures == 0 ? 0 : 1;
  }
  for (int repeat = 0; repeat < absl::GetFlag(FLAGS_repeats); ++repeat) {
    for (const absl::string_view world_text :
         absl::StrSplit(absl::GetFlag(FLAGS_worlds), ',', absl::SkipEmpty())) {
      int world = 0;
      if (!absl::SimpleAtoi(world_text, &world) || world < 1) {
        std::cerr << "--worlds: positive integers separated by commas, got '"
                  << absl::GetFlag(FLAGS_worlds) << "'\n";
        return 1;
      }
      for (const std::string& name : configs) {
        if (world == 1 && name == "collectives") continue;
        const int port = process_group::PickFreePort();
        const std::vector<absl::Status> statuses = process_group::RunRanks(
            world, absl::Minutes(10), [&](int rank) { return RunRank(name, rank, world, port); });
        for (size_t r = 0; r < statuses.size(); ++r) {
          if (statuses[r].ok()) continue;
          std::cerr << name << " world " << world << " rank " << r << ": " << statuses[r] << "\n";
          ++failures;
        }
      }
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace vision::distributed::strategies

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return vision::distributed::strategies::Main();
}
