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
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/batch.h"
#include "core/host_memory.h"
#include "core/model.h"
#include "core/optimizer.h"
#include "engine/loss_scaler.h"
#include "engine/optimizer_step.h"
#include "engine/memory_format.h"
#include "models/dbnet/dbnet.pb.h"
#include "models/testing/step_benchmark.h"

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
ABSL_FLAG(bool, cuda_graph, false,
          "CUDA, with --optimizer=sgd: capture one training step in a CUDA graph after the "
          "warm-up steps, check one replay against one eager step from the same state, and time "
          "replays (models/testing/step_benchmark.h CapturedStep)");
ABSL_FLAG(std::string, optimizer_implementation, "auto",
          "with --optimizer=sgd: auto, for_loop, foreach or fused (the config's "
          "optimizer.implementation; auto is fused on CUDA, for_loop on the CPU)");
ABSL_FLAG(bool, cudnn_benchmark, false, "let cuDNN time its convolution algorithms (CUDA)");
ABSL_FLAG(bool, channels_last, false,
          "weights and images in channels-last layout (TrainPipelineConfig.memory_format)");
ABSL_FLAG(std::string, head_implementation, "phase_matmul",
          "phase_matmul or modules: DBNetOptions.head_implementation (models/dbnet/db_head.h)");
ABSL_FLAG(std::string, cpu_convolution, "aten",
          "aten or winograd: TrainPipelineConfig.cpu_convolution (models/ops/winograd_conv.h)");
ABSL_FLAG(int, profile_steps, 0,
          "after the timed steps, profile this many more and print the operations that took "
          "the most device time");
ABSL_FLAG(int, sync_steps, 2,
          "count the host-device synchronisations of this many steps after the timed ones "
          "(CUDA)");

namespace vision::models::dbnet {
namespace {

namespace bench = vision::models::testing;

double PeakResidentMiB() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return -1;
}

int Run() {
  at::set_num_threads(1);
  if (absl::GetFlag(FLAGS_retain_host_memory)) core::RetainFreedHostMemory();
  absl::StatusOr<c10::Device> device = bench::ParseDevice(absl::GetFlag(FLAGS_device));
  absl::StatusOr<bench::AmpMode> amp = bench::ParseAmp(absl::GetFlag(FLAGS_amp));
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
  if (const absl::Status s = bench::SetCpuConvolution(absl::GetFlag(FLAGS_cpu_convolution));
      !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 1;
  }

  DBNetOptions options;
  options.mutable_backbone()->set_type(absl::GetFlag(FLAGS_backbone));
  const std::string head = absl::GetFlag(FLAGS_head_implementation);
  if (head != "phase_matmul" && head != "modules") {
    std::fprintf(stderr, "--head_implementation: phase_matmul or modules, got '%s'\n",
                 head.c_str());
    return 1;
  }
  options.set_head_implementation(head == "modules" ? DBNetOptions::MODULES
                                                    : DBNetOptions::PHASE_MATMUL);
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
  const bool channels_last = absl::GetFlag(FLAGS_channels_last);
  if (channels_last) engine::ToChannelsLast(*model);
  model->train();
  std::unique_ptr<core::Optimizer> optimizer;
  if (optimizer_name == "sgd") {
    auto sgd = bench::MakeSgd(*model, 0.007, 0.9, 1e-4,
                              absl::GetFlag(FLAGS_optimizer_implementation), device->type());
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
  if (channels_last) batch.images = engine::ImagesToChannelsLast(batch.images);
  batch.targets["gt"] = (at::rand({n, size, size}, on_device) > 0.9).to(at::kFloat);
  batch.targets["mask"] = at::ones({n, size, size}, on_device);
  batch.targets["thresh_map"] = at::rand({n, size, size}, on_device) * 0.4 + 0.3;
  batch.targets["thresh_mask"] = (at::rand({n, size, size}, on_device) > 0.5).to(at::kFloat);
  const double before = PeakResidentMiB();

  if (absl::GetFlag(FLAGS_cuda_graph)) {
    if (!optimizer) {
      std::fprintf(stderr, "--cuda_graph needs --optimizer=sgd\n");
      return 1;
    }
    auto train_step = [&]() -> at::Tensor {
      const at::Tensor loss = bench::LossUnderAutocast(*amp, device->type(),
                                                       [&] { return model->Losses(batch); });
      scaler.Scale(loss).backward();
      engine::RunOptimizerPhase(params, scaler, *optimizer, {});
      return loss.detach();
    };
    return bench::RunCapturedSteps(
        *device, train_step, *model, *optimizer, n, absl::GetFlag(FLAGS_steps),
        absl::GetFlag(FLAGS_warmup),
        {absl::GetFlag(FLAGS_amp), 0, {}, absl::GetFlag(FLAGS_optimizer_implementation), &scaler},
        absl::GetFlag(FLAGS_sync_steps), absl::GetFlag(FLAGS_profile_steps));
  }

  // Phases: forward with the losses, backward, optimizer (unscale-and-check, step, zero_grad).
  bench::PhaseTimer timer(*device, optimizer ? 3 : 2);
  auto step = [&](bench::PhaseTimer* t) {
    if (t) t->Mark();
    if (!optimizer) model->zero_grad();
    const at::Tensor loss = bench::LossUnderAutocast(*amp, device->type(),
                                                     [&] { return model->Losses(batch); });
    if (t) t->Mark();
    scaler.Scale(loss).backward();
    if (t) t->Mark();
    if (!optimizer) return;
    engine::RunOptimizerPhase(params, scaler, *optimizer, {});
    optimizer->torch_optimizer().zero_grad();
    if (t) t->Mark();
  };
  const int steps = absl::GetFlag(FLAGS_steps);
  if (steps > 1) {
    for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) step(nullptr);
  }
  bench::Synchronize(*device);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step(&timer);
  bench::Synchronize(*device);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / steps;
  std::printf("checkpoint [%s]: peak RSS %.0f MiB (%.0f MiB before the step), step %.3f s\n",
              absl::GetFlag(FLAGS_checkpoint).c_str(), PeakResidentMiB(), before, seconds);

  const std::vector<double> phase_ms = timer.MeanMs();
  bench::ReportSteps(*device,
                     {absl::GetFlag(FLAGS_amp), n / seconds, phase_ms,
                      optimizer ? absl::GetFlag(FLAGS_optimizer_implementation) : "", &scaler},
                     absl::GetFlag(FLAGS_sync_steps), absl::GetFlag(FLAGS_profile_steps),
                     seconds * 1000, [&] { step(nullptr); });
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
