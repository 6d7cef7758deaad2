// Peak memory and time of DBNet training steps: with and without activation checkpointing
// (benchmarks/activation_checkpointing.sh, each in its own process, as peak resident memory
// only grows within a process), against the same network in Python PyTorch
// (benchmarks/dbnet_step.sh on CPU, benchmarks/gpu/run.sh on a GPU), on CPU or CUDA, in
// float32 or under autocast as the trainer runs it (engine/trainer.cc):
//   activation_memory_benchmark --size=640 --batch=2 --checkpoint=layer1,layer2,layer3,layer4
//   activation_memory_benchmark --device=cuda --amp=fp16 --optimizer=sgd --batch=16
//       --steps=20 --warmup=5 --profile_steps=3 [--optimizer_implementation=fused]
// The first output line keeps its format for the scripts that read it; a "summary:" line of
// key=value pairs follows (images/s, the mean time per phase, peak GPU memory), and with
// --profile_steps the operations that took the most device time.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/batch.h"
#include "core/config/pipeline.pb.h"
#include "core/host_memory.h"
#include "core/model.h"
#include "core/optimizer.h"
#include "core/param_groups.h"
#include "engine/autocast.h"
#include "engine/loss_scaler.h"
#include "engine/optim/optim.pb.h"
#include "models/dbnet/dbnet.pb.h"

ABSL_FLAG(int, size, 640, "square input size");
ABSL_FLAG(int, batch, 2, "images per step");
ABSL_FLAG(std::string, checkpoint, "", "comma-separated ResNet stages to checkpoint (layer1..4)");
ABSL_FLAG(std::string, backbone, "ResNet18", "registered backbone");
ABSL_FLAG(bool, retain_host_memory, true,
          "Keep freed host memory for reuse as //tools:train does (core/host_memory.h)");
ABSL_FLAG(int, steps, 1, "timed training steps");
ABSL_FLAG(int, warmup, 1,
          "untimed steps before the timed ones when --steps > 1 (allocator caches, cuDNN's "
          "algorithm search); one --steps=1 step shows the memory of a first step");
ABSL_FLAG(std::string, device, "cpu", "\"cpu\", \"cuda\" or \"cuda:N\"");
ABSL_FLAG(std::string, amp, "none",
          "none, bf16 or fp16: autocast around forward and losses as the trainer's "
          "mixed_precision does; fp16 with the trainer's dynamic loss scaling");
ABSL_FLAG(std::string, optimizer, "none",
          "none (forward and backward only) or sgd: also the trainer's optimizer step as "
          "icdar2015_resnet18.pbtxt configures it (SGD, momentum 0.9, weight decay 1e-4 off "
          "norm weights and biases), with its gradient unscale-and-check");
ABSL_FLAG(std::string, optimizer_implementation, "auto",
          "with --optimizer=sgd: auto, for_loop, foreach or fused (the config's "
          "optimizer.implementation; auto is foreach on CUDA, for_loop on the CPU)");
ABSL_FLAG(bool, cudnn_benchmark, false, "let cuDNN time its convolution algorithms (CUDA)");
ABSL_FLAG(int, profile_steps, 0,
          "after the timed steps, profile this many more and print the operations that took "
          "the most device time");

namespace vision::models::dbnet {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

double PeakResidentMiB() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return -1;
}

struct AmpMode {
  bool enabled = false;
  at::ScalarType dtype = at::kFloat;
};

absl::StatusOr<AmpMode> ParseAmp(const std::string& name) {
  if (name == "none") return AmpMode{};
  if (name == "bf16") return AmpMode{true, at::kBFloat16};
  if (name == "fp16") return AmpMode{true, at::kHalf};
  return absl::InvalidArgumentError(absl::StrCat("--amp: none, bf16 or fp16, got '", name, "'"));
}

absl::StatusOr<c10::Device> ParseDevice(const std::string& name) {
  c10::Device device(c10::kCPU);
  try {
    device = c10::Device(name);
  } catch (const c10::Error&) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device: cpu, cuda or cuda:N, got '", name, "'"));
  }
  if (device.is_cpu()) return device;
  if (!device.is_cuda()) return absl::InvalidArgumentError("--device: only cpu and cuda are timed");
  if (!torch::cuda::is_available()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device=", name,
                     ": no CUDA device is visible to this process (or the LibTorch it "
                     "links has no CUDA)"));
  }
  if (!device.has_index()) device.set_index(0);
  if (device.index() >= static_cast<int>(torch::cuda::device_count())) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device=", name, ": only ", torch::cuda::device_count(), " GPU(s)"));
  }
  return device;
}

// The time each phase of a step takes. CUDA kernels run asynchronously, so there the marks are
// events on the current stream, read once after the loop: the device's time per phase without a
// synchronisation inside the steps that would change what is measured. On the CPU a phase is
// done when its call returns, and the wall clock measures it.
class PhaseTimer {
 public:
  PhaseTimer(const c10::Device& device, int phases) : device_(device), phases_(phases) {
    if (device_.is_cuda()) stream_ = c10::impl::VirtualGuardImpl(device_.type()).getStream(device_);
  }

  // At the start of each step and at the end of each of its phases.
  void Mark() {
    if (!device_.is_cuda()) {
      times_.push_back(std::chrono::steady_clock::now());
      return;
    }
    // BACKEND_DEFAULT: a CUDA event that records timing (PyTorch's default event does not).
    events_.emplace_back(device_.type(), c10::EventFlag::BACKEND_DEFAULT);
    events_.back().record(*stream_);
  }

  // Mean milliseconds of each phase over the steps marked so far.
  std::vector<double> MeanMs() const {
    std::vector<double> sums(phases_, 0.0);
    const size_t marks = device_.is_cuda() ? events_.size() : times_.size();
    const size_t steps = marks / (phases_ + 1);
    if (device_.is_cuda() && !events_.empty()) events_.back().synchronize();
    for (size_t s = 0; s < steps; ++s) {
      for (int p = 0; p < phases_; ++p) {
        const size_t i = s * (phases_ + 1) + p;
        sums[p] +=
            device_.is_cuda()
                ? events_[i].elapsedTime(events_[i + 1])
                : std::chrono::duration<double, std::milli>(times_[i + 1] - times_[i]).count();
      }
    }
    for (double& sum : sums) sum /= std::max<size_t>(steps, 1);
    return sums;
  }

 private:
  c10::Device device_;
  int phases_;
  std::optional<c10::Stream> stream_;
  std::vector<c10::Event> events_;
  std::vector<std::chrono::steady_clock::time_point> times_;
};

void Synchronize(const c10::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// The trainer's SGD step for the paper's recipe, built as core/pipeline_builder.cc builds it.
absl::StatusOr<std::unique_ptr<core::Optimizer>> MakeSgd(const torch::nn::Module& model,
                                                         const std::string& implementation,
                                                         c10::DeviceType device_type) {
  core::OptimizerConfig config;
  config.set_type("SGD");
  config.set_lr(0.007);
  config.set_weight_decay(1e-4);
  core::OptimizerConfig::Implementation parsed;
  if (!core::OptimizerConfig::Implementation_Parse(absl::AsciiStrToUpper(implementation),
                                                   &parsed)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--optimizer_implementation: auto, for_loop, foreach or fused, got '", implementation,
        "'"));
  }
  config.set_implementation(parsed);
  engine::optim::SgdOptions sgd;
  sgd.set_momentum(0.9);
  config.mutable_options()->PackFrom(sgd);
  return core::OptimizerRegistry::Get().Create(
      config.type(), config.options(),
      core::OptimizerSpec{core::MakeParamGroups(model, config, config.lr()),
                          config.implementation(), device_type});
}

// Prints the operations that took the most time in `steps` profiled steps: CUDA kernels and
// copies on a GPU (with the share of the step the device was busy, which tells launch-bound
// from compute-bound), operators on the CPU (inclusive of the operators they call).
template <typename Step>
void Profile(const c10::Device& device, int steps, double step_ms, Step step) {
  namespace profiler = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  const std::set<ActivityType> activities =
      device.is_cuda() ? std::set<ActivityType>{ActivityType::CPU, ActivityType::CUDA}
                       : std::set<ActivityType>{ActivityType::CPU};
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  profiler::prepareProfiler(config, activities);
  profiler::enableProfiler(config, activities);
  for (int i = 0; i < steps; ++i) step();
  Synchronize(device);
  const std::unique_ptr<profiler::ProfilerResult> result = profiler::disableProfiler();
  std::map<std::string, double> ms_by_name;
  double busy_ms = 0;
  for (const profiler::KinetoEvent& event : result->events()) {
    if (event.deviceType() != device.type()) continue;
    const double ms = event.durationNs() / 1e6 / steps;
    ms_by_name[event.name()] += ms;
    busy_ms += ms;
  }
  std::vector<std::pair<double, std::string>> ranked;
  for (const auto& [name, ms] : ms_by_name) ranked.emplace_back(ms, name);
  std::sort(ranked.rbegin(), ranked.rend());
  if (device.is_cuda()) {
    std::printf(
        "profile: device busy %.1f ms of a %.1f ms step (%.0f%%); top kernels, ms per step:\n",
        busy_ms, step_ms, 100 * busy_ms / step_ms);
  } else {
    std::printf("profile: top operators, ms per step including the operators they call:\n");
  }
  for (size_t i = 0; i < std::min<size_t>(ranked.size(), 10); ++i) {
    std::printf("  %8.2f  %s\n", ranked[i].first, ranked[i].second.substr(0, 110).c_str());
  }
}

int Run() {
  at::set_num_threads(1);
  if (absl::GetFlag(FLAGS_retain_host_memory)) core::RetainFreedHostMemory();
  absl::StatusOr<c10::Device> device = ParseDevice(absl::GetFlag(FLAGS_device));
  absl::StatusOr<AmpMode> amp = ParseAmp(absl::GetFlag(FLAGS_amp));
  const std::string optimizer_name = absl::GetFlag(FLAGS_optimizer);
  for (const absl::Status& s : {device.status(), amp.status()}) {
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  if (optimizer_name != "none" && optimizer_name != "sgd") {
    std::fprintf(stderr, "--optimizer: none or sgd, got '%s'\n", optimizer_name.c_str());
    return 1;
  }
  at::globalContext().setBenchmarkCuDNN(absl::GetFlag(FLAGS_cudnn_benchmark));

  DBNetOptions options;
  options.mutable_backbone()->set_type(absl::GetFlag(FLAGS_backbone));
  google::protobuf::Any any;
  any.PackFrom(options);
  auto made = core::ModelRegistry::Get().Create("DBNet", any);
  if (!made.ok()) {
    std::fprintf(stderr, "%s\n", std::string(made.status().message()).c_str());
    return 1;
  }
  std::shared_ptr<core::Model> model = std::move(made).value();
  std::vector<std::string> stages;
  for (absl::string_view s :
       absl::StrSplit(absl::GetFlag(FLAGS_checkpoint), ',', absl::SkipEmpty())) {
    stages.push_back("backbone." + std::string(s));
  }
  if (auto s = model->EnableActivationCheckpointing(stages); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 1;
  }
  model->to(*device);
  model->train();
  std::unique_ptr<core::Optimizer> optimizer;
  if (optimizer_name == "sgd") {
    auto sgd = MakeSgd(*model, absl::GetFlag(FLAGS_optimizer_implementation), device->type());
    if (!sgd.ok()) {
      std::fprintf(stderr, "%s\n", std::string(sgd.status().message()).c_str());
      return 1;
    }
    optimizer = std::move(sgd).value();
  }
  engine::LossScalerOptions scaler_options;
  scaler_options.enabled = amp->dtype == at::kHalf;
  engine::LossScaler scaler(scaler_options);
  const std::vector<at::Tensor> params = model->parameters();

  const int n = absl::GetFlag(FLAGS_batch), size = absl::GetFlag(FLAGS_size);
  const at::TensorOptions on_device = at::TensorOptions().device(*device);
  core::Batch batch;
  batch.images = at::randn({n, 3, size, size}, on_device);
  batch.targets["gt"] = (at::rand({n, size, size}, on_device) > 0.9).to(at::kFloat);
  batch.targets["mask"] = at::ones({n, size, size}, on_device);
  batch.targets["thresh_map"] = at::rand({n, size, size}, on_device) * 0.4 + 0.3;
  batch.targets["thresh_mask"] = (at::rand({n, size, size}, on_device) > 0.5).to(at::kFloat);
  const double before = PeakResidentMiB();

  // Phases: forward with the losses, backward, optimizer (unscale-and-check, step, zero_grad).
  PhaseTimer timer(*device, optimizer ? 3 : 2);
  auto step = [&](PhaseTimer* t) {
    if (t) t->Mark();
    if (!optimizer) model->zero_grad();
    at::Tensor loss;
    {
      engine::AutocastScope autocast(amp->enabled, device->type(), amp->dtype);
      for (const auto& [name, term] : model->Losses(batch)) {
        loss = loss.defined() ? loss + term.to(at::kFloat) : term.to(at::kFloat);
      }
    }
    if (t) t->Mark();
    scaler.Scale(loss).backward();
    if (t) t->Mark();
    if (!optimizer) return;
    const bool finite = scaler.UnscaleAndCheckFinite(params);
    scaler.Update(finite);
    if (finite) optimizer->torch_optimizer().step();
    optimizer->torch_optimizer().zero_grad();
    if (t) t->Mark();
  };
  const int steps = absl::GetFlag(FLAGS_steps);
  if (steps > 1) {
    for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) step(nullptr);
  }
  Synchronize(*device);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step(&timer);
  Synchronize(*device);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / steps;
  std::printf("checkpoint [%s]: peak RSS %.0f MiB (%.0f MiB before the step), step %.3f s\n",
              absl::GetFlag(FLAGS_checkpoint).c_str(), PeakResidentMiB(), before, seconds);

  const std::vector<double> phase_ms = timer.MeanMs();
  std::string summary = absl::StrCat("summary: device=", device->str(),
                                     " amp=", absl::GetFlag(FLAGS_amp), " images/s=", n / seconds,
                                     " forward_ms=", phase_ms[0], " backward_ms=", phase_ms[1]);
  if (optimizer) {
    absl::StrAppend(&summary, " optimizer_ms=", phase_ms[2], " optimizer_implementation=",
                    absl::GetFlag(FLAGS_optimizer_implementation));
  }
  if (scaler.enabled()) absl::StrAppend(&summary, " loss_scale=", scaler.scale());
  if (device->is_cuda()) {
    const c10::CachingDeviceAllocator::DeviceStats stats =
        // `--device=cuda` has no index (-1, which the allocator refuses as "invalid device
        // argument"); the tensors live on the current device.
        c10::getDeviceAllocator(c10::kCUDA)->getDeviceStats(batch.images.device().index());
    constexpr size_t kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    absl::StrAppend(&summary, " peak_allocated_mib=", stats.allocated_bytes[kAll].peak / kMiB,
                    " peak_reserved_mib=", stats.reserved_bytes[kAll].peak / kMiB);
  }
  std::printf("%s\n", summary.c_str());
  std::fflush(stdout);
  if (const int profile_steps = absl::GetFlag(FLAGS_profile_steps); profile_steps > 0) {
    // The timed figures are out already: a profiler that cannot start costs only this list.
    try {
      Profile(*device, profile_steps, seconds * 1000, [&] { step(nullptr); });
    } catch (const std::exception& e) {
      std::printf("profile: failed: %s\n", e.what());
    }
  }
  return 0;
}

}  // namespace
}  // namespace vision::models::dbnet

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // A failing kernel or autocast rule throws c10::Error: say what, not "terminate called".
  try {
    return vision::models::dbnet::Run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "activation_memory_benchmark: %s\n", e.what());
    return 1;
  }
}
