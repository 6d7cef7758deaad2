// One DANet training step (forward, the three cross-entropy losses, backward, the trainer's SGD
// update) on random images and labels, timed, on the CPU or CUDA, in float32 or under autocast
// (fp16 with the trainer's loss scaling); benchmarks/danet_step.sh (CPU) and
// benchmarks/gpu/run.sh (CUDA) run it next to the same network written in Python PyTorch
// (benchmarks/danet_peer.py) with the same flags. The first output line keeps its format for
// danet_step.sh; a "summary:" line follows (images/s, ms per phase, host-device
// synchronisations per step and peak memory on CUDA), and with --profile_steps the operations
// that took the most time. Not a test: speed is reported, never asserted.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <sys/resource.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "core/batch.h"
#include "core/host_memory.h"
#include "engine/loss_scaler.h"
#include "engine/optimizer_step.h"
#include "engine/memory_format.h"
#include "models/backbones/resnet.pb.h"
#include "models/danet/danet.h"
#include "models/danet/danet.pb.h"
#include "models/testing/step_benchmark.h"

ABSL_FLAG(int, depth, 18, "ResNet depth: 18, 34, 50 or 101 (output stride 8, multi-grid).");
ABSL_FLAG(int, height, 128, "Image height.");
ABSL_FLAG(int, width, 128, "Image width.");
ABSL_FLAG(int, batch, 4, "Images per step.");
ABSL_FLAG(int, steps, 5, "Timed steps (after the warm-up steps).");
ABSL_FLAG(int, warmup, 1, "Untimed steps first (when more than one step is timed).");
ABSL_FLAG(int, threads, 1, "Intra-op threads.");
ABSL_FLAG(bool, checkpointing, false,
          "Recompute backbone.layer3/layer4 and both attention modules in backward.");
ABSL_FLAG(std::string, device, "cpu", "\"cpu\", \"cuda\" or \"cuda:N\"");
ABSL_FLAG(std::string, amp, "none", "none, bf16 or fp16 (autocast as the trainer runs it)");
ABSL_FLAG(std::string, optimizer_implementation, "auto", "auto, for_loop, foreach or fused");
ABSL_FLAG(bool, cuda_graph, false,
          "CUDA: capture one training step in a CUDA graph after the warm-up steps, check one "
          "replay against one eager step from the same state, and time replays "
          "(models/testing/step_benchmark.h CapturedStep)");
ABSL_FLAG(bool, cudnn_benchmark, false, "let cuDNN time its convolution algorithms (CUDA)");
ABSL_FLAG(bool, channels_last, false,
          "weights and images in channels-last layout (TrainPipelineConfig.memory_format)");
ABSL_FLAG(std::string, cpu_convolution, "aten",
          "aten or winograd: TrainPipelineConfig.cpu_convolution (models/ops/winograd_conv.h)");
ABSL_FLAG(bool, retain_host_memory, false,
          "keep freed host memory for reuse as //tools:train does (core/host_memory.h); off: "
          "glibc's malloc defaults, as the Python peer runs without MALLOC_* variables");
ABSL_FLAG(int, profile_steps, 0, "profile this many steps after the timed ones");
ABSL_FLAG(int, sync_steps, 2,
          "count the host-device synchronisations of this many steps after the timed ones "
          "(CUDA)");

namespace vision::models::danet {
namespace {

namespace bench = vision::models::testing;

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "danet_step_benchmark: %s\n", std::string(status.message()).c_str());
  return 1;
}

int Run() {
  if (absl::GetFlag(FLAGS_retain_host_memory)) vision::core::RetainFreedHostMemory();
  at::set_num_threads(absl::GetFlag(FLAGS_threads));
  torch::manual_seed(0);
  absl::StatusOr<c10::Device> device = bench::ParseDevice(absl::GetFlag(FLAGS_device));
  if (!device.ok()) return Fail(device.status());
  absl::StatusOr<bench::AmpMode> amp = bench::ParseAmp(absl::GetFlag(FLAGS_amp));
  if (!amp.ok()) return Fail(amp.status());
  at::globalContext().setBenchmarkCuDNN(absl::GetFlag(FLAGS_cudnn_benchmark));
  if (const absl::Status s = bench::SetCpuConvolution(absl::GetFlag(FLAGS_cpu_convolution));
      !s.ok()) {
    return Fail(s);
  }
  const int depth = absl::GetFlag(FLAGS_depth);
  DANetOptions options;
  options.set_num_classes(19);
  options.mutable_backbone()->set_type("ResNet" + std::to_string(depth));
  vision::models::backbones::ResNetOptions resnet;
  resnet.set_output_stride(8);
  for (int m : depth >= 50 ? std::vector<int>{1, 2, 4} : std::vector<int>{1, 2}) {
    resnet.add_multi_grid(m);
  }
  options.mutable_backbone()->mutable_options()->PackFrom(resnet);
  auto created = DANet::Create(options);
  if (!created.ok()) return Fail(created.status());
  // Shared: the parameter groups walk the model's modules, itself included.
  std::shared_ptr<DANet> model = *std::move(created);
  if (absl::GetFlag(FLAGS_checkpointing)) {
    const absl::Status s = model->EnableActivationCheckpointing(
        {"backbone.layer3", "backbone.layer4", "head.sa", "head.sc"});
    if (!s.ok()) return Fail(s);
  }
  model->to(*device);
  const bool channels_last = absl::GetFlag(FLAGS_channels_last);
  if (channels_last) engine::ToChannelsLast(*model);
  model->train();
  auto optimizer = bench::MakeSgd(*model, 0.01, 0.9, 1e-4,
                                  absl::GetFlag(FLAGS_optimizer_implementation), device->type());
  if (!optimizer.ok()) return Fail(optimizer.status());
  engine::LossScalerOptions scaler_options;
  scaler_options.enabled = amp->dtype == at::kHalf;
  engine::LossScaler scaler(scaler_options);
  const std::vector<at::Tensor> params = model->parameters();

  const int batch = absl::GetFlag(FLAGS_batch);
  const int height = absl::GetFlag(FLAGS_height);
  const int width = absl::GetFlag(FLAGS_width);
  const at::TensorOptions on_device = at::TensorOptions().device(*device);
  vision::core::Batch data;
  data.images = at::randn({batch, 3, height, width}, on_device);
  if (channels_last) data.images = engine::ImagesToChannelsLast(data.images);
  data.targets["semantic"] =
      at::randint(0, 19, {batch, height, width}, on_device.dtype(at::kLong)).to(at::kByte);

  // Phases: forward with the losses, backward, optimizer (unscale-and-check, step, zero_grad).
  bench::PhaseTimer timer(*device, 3);
  at::Tensor last_loss;
  auto step = [&](bench::PhaseTimer* t) {
    if (t) t->Mark();
    const at::Tensor loss = bench::LossUnderAutocast(*amp, device->type(),
                                                     [&] { return model->Losses(data); });
    if (t) t->Mark();
    scaler.Scale(loss).backward();
    if (t) t->Mark();
    engine::RunOptimizerPhase(params, scaler, **optimizer, {});
    (*optimizer)->torch_optimizer().zero_grad();
    if (t) t->Mark();
    last_loss = loss.detach();
  };
  const int steps = absl::GetFlag(FLAGS_steps);
  if (absl::GetFlag(FLAGS_cuda_graph)) {
    auto train_step = [&]() -> at::Tensor {
      const at::Tensor loss = bench::LossUnderAutocast(*amp, device->type(),
                                                       [&] { return model->Losses(data); });
      scaler.Scale(loss).backward();
      engine::RunOptimizerPhase(params, scaler, **optimizer, {});
      return loss.detach();
    };
    return bench::RunCapturedSteps(
        *device, train_step, *model, **optimizer, batch, steps, absl::GetFlag(FLAGS_warmup),
        {absl::GetFlag(FLAGS_amp), 0, {}, absl::GetFlag(FLAGS_optimizer_implementation), &scaler},
        absl::GetFlag(FLAGS_sync_steps), absl::GetFlag(FLAGS_profile_steps));
  }
  if (steps > 1) {
    for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) step(nullptr);
  }
  bench::Synchronize(*device);
  // On the CPU each step is timed by the wall clock and the median reported (danet_step.sh).
  std::vector<double> seconds;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    const auto begin = std::chrono::steady_clock::now();
    step(&timer);
    if (device->is_cpu()) {
      seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
    }
  }
  bench::Synchronize(*device);
  const double mean =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / steps;
  if (seconds.empty()) seconds.push_back(mean);
  std::sort(seconds.begin(), seconds.end());
  // Peak resident memory of the whole process (Linux reports KiB): weights, optimizer state
  // and the largest step's activations.
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::printf(
      "DANet-ResNet-%d %dx%d batch %d threads %d%s: median step %.4f s, peak RSS %.0f MiB "
      "(last loss %.4f)\n",
      depth, height, width, batch, absl::GetFlag(FLAGS_threads),
      absl::GetFlag(FLAGS_checkpointing) ? " checkpointing" : "", seconds[seconds.size() / 2],
      usage.ru_maxrss / 1024.0, last_loss.item<double>());
  const std::vector<double> phase_ms = timer.MeanMs();
  bench::ReportSteps(*device,
                     {absl::GetFlag(FLAGS_amp), batch / mean, phase_ms,
                      absl::GetFlag(FLAGS_optimizer_implementation), &scaler},
                     absl::GetFlag(FLAGS_sync_steps), absl::GetFlag(FLAGS_profile_steps),
                     mean * 1000, [&] { step(nullptr); });
  return 0;
}

}  // namespace
}  // namespace vision::models::danet

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // A failing kernel or autocast rule throws c10::Error: say what, not "terminate called".
  try {
    return vision::models::danet::Run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "danet_step_benchmark: %s\n", e.what());
    return 1;
  }
}
