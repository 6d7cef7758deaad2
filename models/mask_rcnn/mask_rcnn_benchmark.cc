// Our Mask R-CNN R50-FPN on the weights and batch that benchmarks/mask_rcnn_peer.py writes,
// timing the same work as the peer: training steps (forward, backward, SGD step) and inference
// (detections with masks pasted at the image size, as Predict does). Run by
// benchmarks/mask_rcnn_step.sh, which prints the two side by side. --profile_dir: after the
// timed steps, --profile_steps more training steps (forward and backward, no optimizer step) run
// under LibTorch's Kineto profiler and are written as <profile_dir>/train_profile.json in
// torch.profiler's Chrome trace format (benchmarks/op_table.py compares it with the peer's);
// with --profile=infer (or both), --profile_steps more inference batches (Predict) after the
// timed ones, written as <profile_dir>/infer_profile.json.
// On a GPU (benchmarks/gpu/run.sh): --device=cuda with --amp=none|bf16|fp16 (autocast as the
// trainer runs it, fp16 with its loss scaling), the trainer's SGD (--optimizer_implementation),
// per-phase times from CUDA events, and a "summary:" line (images/s, ms per phase,
// host-device synchronisations per step, peak allocator memory) as the other step benchmarks
// print (models/testing/step_benchmark.h); --gpu_profile_steps lists the top kernels.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "core/batch.h"
#include "core/profile_steps.h"
#include "engine/loss_scaler.h"
#include "engine/optimizer_step.h"
#include "engine/memory_format.h"
#include "models/backbones/torchvision_import.h"
#include "models/mask_rcnn/mask_rcnn.h"
#include "models/testing/step_benchmark.h"

ABSL_FLAG(std::string, dir, "", "Directory with the peer's weights.pt and case.pt.");
ABSL_FLAG(int, steps, 3, "Timed steps (after the warm-up steps).");
ABSL_FLAG(int, warmup, 1, "Untimed training steps and inference batches first.");
ABSL_FLAG(std::string, device, "cpu", "\"cpu\", \"cuda\" or \"cuda:N\"");
ABSL_FLAG(std::string, amp, "none", "none, bf16 or fp16 (autocast as the trainer runs it)");
ABSL_FLAG(std::string, optimizer_implementation, "auto", "auto, for_loop, foreach or fused");
ABSL_FLAG(bool, cudnn_benchmark, false, "let cuDNN time its convolution algorithms (CUDA)");
ABSL_FLAG(bool, channels_last, false,
          "weights and images in channels-last layout (TrainPipelineConfig.memory_format)");
ABSL_FLAG(int, sync_steps, 2,
          "count the host-device synchronisations of this many training steps after the timed "
          "ones (CUDA)");
ABSL_FLAG(int, gpu_profile_steps, 0,
          "profile this many training steps after the timed ones and print the operations that "
          "took the most device time");
ABSL_FLAG(bool, inference, true, "also time inference (Predict) after training");
ABSL_FLAG(int, threads, 1, "Intra-op threads.");
ABSL_FLAG(std::string, profile_dir, "",
          "Non-empty: after the timed training steps, --profile_steps more (forward and backward, "
          "no optimizer step) run under the Kineto profiler with input shapes, written as "
          "<profile_dir>/train_profile.json (torch.profiler's Chrome trace format; "
          "benchmarks/op_table.py compares two of them).");
ABSL_FLAG(std::string, cpu_convolution, "aten",
          "aten or winograd: TrainPipelineConfig.cpu_convolution (models/ops/winograd_conv.h)");
ABSL_FLAG(int, profile_steps, 2,
          "With --profile_dir: the number of profiled training steps and inference batches.");
ABSL_FLAG(std::string, profile, "train",
          "With --profile_dir: what to profile: train (train_profile.json), infer (Predict, "
          "infer_profile.json) or both.");

namespace vision::models::mask_rcnn {
namespace {

namespace bench = vision::models::testing;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "mask_rcnn_benchmark: %s\n", std::string(status.message()).c_str());
  return 1;
}

int Run() {
  at::set_num_threads(absl::GetFlag(FLAGS_threads));
  absl::StatusOr<c10::Device> device = bench::ParseDevice(absl::GetFlag(FLAGS_device));
  if (!device.ok()) return Fail(device.status());
  absl::StatusOr<bench::AmpMode> amp = bench::ParseAmp(absl::GetFlag(FLAGS_amp));
  if (!amp.ok()) return Fail(amp.status());
  at::globalContext().setBenchmarkCuDNN(absl::GetFlag(FLAGS_cudnn_benchmark));
  if (const absl::Status s = bench::SetCpuConvolution(absl::GetFlag(FLAGS_cpu_convolution));
      !s.ok()) {
    return Fail(s);
  }
  const std::string dir = absl::GetFlag(FLAGS_dir);
  auto weights = backbones::ReadTorchStateDict(dir + "/weights.pt");
  auto case_dict = backbones::ReadTorchStateDict(dir + "/case.pt");
  if (!weights.ok() || !case_dict.ok()) {
    std::fprintf(stderr, "%s %s\n", weights.status().ToString().c_str(),
                 case_dict.status().ToString().c_str());
    return 1;
  }
  std::map<std::string, at::Tensor> c(case_dict->begin(), case_dict->end());
  MaskRCNNOptions options;
  options.set_num_classes(90);
  *options.mutable_backbone() = TorchvisionBackbone();
  auto created = MaskRCNN::Create(options);
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", created.status().ToString().c_str());
    return 1;
  }
  // Shared: the parameter groups walk the model's modules, itself included.
  std::shared_ptr<MaskRCNN> shared = *std::move(created);
  MaskRCNN& model = *shared;
  auto report = ImportTorchvisionMaskRcnn(*weights, model, /*strict=*/true, dir);
  if (!report.ok()) {
    std::fprintf(stderr, "%s\n", report.status().ToString().c_str());
    return 1;
  }
  model.to(*device);
  const bool channels_last = absl::GetFlag(FLAGS_channels_last);
  if (channels_last) engine::ToChannelsLast(model);
  const at::Tensor images = channels_last
                                ? engine::ImagesToChannelsLast(c.at("images").to(*device))
                                : c.at("images").to(*device);
  const int64_t batch = images.size(0);
  std::vector<std::pair<int64_t, int64_t>> sizes(batch, {images.size(2), images.size(3)});
  std::vector<InstanceTargets> targets(batch);
  for (int64_t i = 0; i < batch; ++i) {
    targets[i].boxes = c.at("boxes_" + std::to_string(i)).to(*device);
    targets[i].labels = c.at("labels_" + std::to_string(i)).to(*device);
    targets[i].masks = c.at("masks_" + std::to_string(i)).to(*device);
  }
  // The trainer's SGD over the trainable parameters (no weight decay on biases; the frozen
  // BatchNorm has none), as the peer's.
  auto sgd = bench::MakeSgd(model, 1e-4, 0.9, 1e-4, absl::GetFlag(FLAGS_optimizer_implementation),
                            device->type());
  if (!sgd.ok()) return Fail(sgd.status());
  torch::optim::Optimizer& optimizer = (*sgd)->torch_optimizer();
  engine::LossScalerOptions scaler_options;
  scaler_options.enabled = amp->dtype == at::kHalf;
  engine::LossScaler scaler(scaler_options);
  std::vector<at::Tensor> params;
  for (const at::Tensor& p : model.parameters()) {
    if (p.requires_grad()) params.push_back(p);
  }
  using Clock = std::chrono::steady_clock;
  const int steps = absl::GetFlag(FLAGS_steps);
  const std::string profile_dir = absl::GetFlag(FLAGS_profile_dir);
  const std::string profile = absl::GetFlag(FLAGS_profile);
  if (profile != "train" && profile != "infer" && profile != "both") {
    std::fprintf(stderr, "--profile=%s: expected train, infer or both\n", profile.c_str());
    return 1;
  }
  if (!profile_dir.empty() && !std::filesystem::is_directory(profile_dir)) {
    std::fprintf(stderr, "--profile_dir=%s: not a directory; create it first\n",
                 profile_dir.c_str());
    return 1;
  }
  model.train();
  // Phases: forward with the losses, backward, optimizer (unscale-and-check, step, zero_grad).
  // On the CPU each phase's median over the steps (mask_rcnn_step.sh); on CUDA the mean of
  // CUDA-event times (no synchronisation inside the steps).
  bench::PhaseTimer timer(*device, 3);
  std::vector<double> times, forward, backward, update;
  auto train_step = [&](bench::PhaseTimer* t) {
    const auto start = Clock::now();
    if (t) t->Mark();
    const at::Tensor loss = bench::LossUnderAutocast(
        *amp, device->type(), [&] { return model.LossesFor(images, sizes, targets); });
    if (t) t->Mark();
    const auto forward_done = Clock::now();
    scaler.Scale(loss).backward();
    if (t) t->Mark();
    const auto backward_done = Clock::now();
    engine::RunOptimizerPhase(params, scaler, **sgd, {});
    optimizer.zero_grad();
    if (t) t->Mark();
    const auto end = Clock::now();
    if (t == nullptr) return;
    const auto seconds = [](Clock::time_point a, Clock::time_point b) {
      return std::chrono::duration<double>(b - a).count();
    };
    times.push_back(seconds(start, end));
    forward.push_back(seconds(start, forward_done));
    backward.push_back(seconds(forward_done, backward_done));
    update.push_back(seconds(backward_done, end));
  };
  for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) train_step(nullptr);
  bench::Synchronize(*device);
  const auto timed_start = Clock::now();
  for (int step = 0; step < steps; ++step) train_step(&timer);
  bench::Synchronize(*device);
  const double mean =
      std::chrono::duration<double>(Clock::now() - timed_start).count() / std::max(steps, 1);
  const std::vector<double> phase_ms = timer.MeanMs();
  if (device->is_cpu()) {
    std::printf("train step %.3f s (forward %.3f, backward %.3f, optimizer %.3f)\n", Median(times),
                Median(forward), Median(backward), Median(update));
  } else {
    std::printf("train step %.3f s (forward %.3f, backward %.3f, optimizer %.3f)\n", mean,
                phase_ms[0] / 1e3, phase_ms[1] / 1e3, phase_ms[2] / 1e3);
  }
  bench::ReportSteps(*device,
                     {absl::GetFlag(FLAGS_amp), batch / mean, phase_ms,
                      absl::GetFlag(FLAGS_optimizer_implementation), &scaler},
                     absl::GetFlag(FLAGS_sync_steps), absl::GetFlag(FLAGS_gpu_profile_steps),
                     mean * 1000, [&] { train_step(nullptr); });
  if (!profile_dir.empty() && profile != "infer") {
    const std::string path = profile_dir + "/train_profile.json";
    const absl::Status status = core::ProfileSteps(
        absl::GetFlag(FLAGS_profile_steps),
        [&] {
          at::Tensor loss = at::zeros({}, images.options());
          for (const auto& [name, value] : model.LossesFor(images, sizes, targets)) {
            loss = loss + value;
          }
          optimizer.zero_grad();
          loss.backward();
          return absl::OkStatus();
        },
        path);
    if (!status.ok()) {
      std::fprintf(stderr, "--profile_dir: %s\n", std::string(status.message()).c_str());
      return 1;
    }
  }

  if (!absl::GetFlag(FLAGS_inference)) return 0;
  model.eval();
  core::Batch eval_batch;
  eval_batch.images = images;
  eval_batch.image_sizes = at::tensor({images.size(2), images.size(3)}).repeat({batch, 1});
  for (int64_t i = 0; i < batch; ++i) {
    core::Sample sample;
    sample.original_height = static_cast<int>(images.size(2));
    sample.original_width = static_cast<int>(images.size(3));
    eval_batch.samples.push_back(sample);
  }
  times.clear();
  for (int step = 0; step < absl::GetFlag(FLAGS_warmup) + steps; ++step) {
    const auto start = Clock::now();
    // Predict's detections reach the host: the time includes the device's work.
    const std::vector<core::Sample> predictions = model.Predict(eval_batch);
    if (step >= absl::GetFlag(FLAGS_warmup)) {
      times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
  }
  std::printf("inference %.3f s per batch, %.2f images/s\n", Median(times), batch / Median(times));
  if (!profile_dir.empty() && profile != "train") {
    const absl::Status status = core::ProfileSteps(
        absl::GetFlag(FLAGS_profile_steps),
        [&] {
          model.Predict(eval_batch);
          return absl::OkStatus();
        },
        profile_dir + "/infer_profile.json");
    if (!status.ok()) {
      std::fprintf(stderr, "--profile_dir: %s\n", std::string(status.message()).c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace vision::models::mask_rcnn

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // A failing kernel or autocast rule throws c10::Error: say what, not "terminate called".
  try {
    return vision::models::mask_rcnn::Run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mask_rcnn_benchmark: %s\n", e.what());
    return 1;
  }
}
