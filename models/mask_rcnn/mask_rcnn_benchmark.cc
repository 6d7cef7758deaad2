// Our Mask R-CNN R50-FPN on the weights and batch that benchmarks/mask_rcnn_peer.py writes,
// timing the same work as the peer: training steps (forward, backward, SGD step) and inference
// (detections with masks pasted at the image size, as Predict does). Run by
// benchmarks/mask_rcnn_step.sh, which prints the two side by side. --profile_dir: after the
// timed steps, --profile_steps more training steps (forward and backward, no optimizer step) run
// under LibTorch's Kineto profiler and are written as <profile_dir>/train_profile.json in
// torch.profiler's Chrome trace format (benchmarks/op_table.py compares it with the peer's);
// with --profile=infer (or both), --profile_steps more inference batches (Predict) after the
// timed ones, written as <profile_dir>/infer_profile.json.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "core/batch.h"
#include "core/profile_steps.h"
#include "models/backbones/torchvision_import.h"
#include "models/mask_rcnn/mask_rcnn.h"

ABSL_FLAG(std::string, dir, "", "Directory with the peer's weights.pt and case.pt.");
ABSL_FLAG(int, steps, 3, "Timed steps (after one warm-up step).");
ABSL_FLAG(int, threads, 1, "Intra-op threads.");
ABSL_FLAG(std::string, profile_dir, "",
          "Non-empty: after the timed training steps, --profile_steps more (forward and backward, "
          "no optimizer step) run under the Kineto profiler with input shapes, written as "
          "<profile_dir>/train_profile.json (torch.profiler's Chrome trace format; "
          "benchmarks/op_table.py compares two of them).");
ABSL_FLAG(int, profile_steps, 2,
          "With --profile_dir: the number of profiled training steps and inference batches.");
ABSL_FLAG(std::string, profile, "train",
          "With --profile_dir: what to profile: train (train_profile.json), infer (Predict, "
          "infer_profile.json) or both.");

namespace vision::models::mask_rcnn {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Run() {
  at::set_num_threads(absl::GetFlag(FLAGS_threads));
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
  MaskRCNN& model = **created;
  auto report = ImportTorchvisionMaskRcnn(*weights, model, /*strict=*/true, dir);
  if (!report.ok()) {
    std::fprintf(stderr, "%s\n", report.status().ToString().c_str());
    return 1;
  }
  const at::Tensor images = c.at("images");
  const int64_t batch = images.size(0);
  std::vector<std::pair<int64_t, int64_t>> sizes(batch, {images.size(2), images.size(3)});
  std::vector<InstanceTargets> targets(batch);
  for (int64_t i = 0; i < batch; ++i) {
    targets[i].boxes = c.at("boxes_" + std::to_string(i));
    targets[i].labels = c.at("labels_" + std::to_string(i));
    targets[i].masks = c.at("masks_" + std::to_string(i));
  }
  std::vector<at::Tensor> params;
  for (const at::Tensor& p : model.parameters()) {
    if (p.requires_grad()) params.push_back(p);
  }
  torch::optim::SGD optimizer(params,
                              torch::optim::SGDOptions(1e-4).momentum(0.9).weight_decay(1e-4));
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
  std::vector<double> times, forward, backward, update;
  const auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  for (int step = 0; step <= steps; ++step) {
    const auto start = Clock::now();
    at::Tensor loss = at::zeros({});
    for (const auto& [name, value] : model.LossesFor(images, sizes, targets)) loss = loss + value;
    const auto forward_done = Clock::now();
    optimizer.zero_grad();
    loss.backward();
    const auto backward_done = Clock::now();
    optimizer.step();
    const auto end = Clock::now();
    if (step == 0) continue;  // the first step warms up allocators and kernels
    times.push_back(seconds(start, end));
    forward.push_back(seconds(start, forward_done));
    backward.push_back(seconds(forward_done, backward_done));
    update.push_back(seconds(backward_done, end));
  }
  std::printf("train step %.3f s (forward %.3f, backward %.3f, optimizer %.3f)\n", Median(times),
              Median(forward), Median(backward), Median(update));
  if (!profile_dir.empty() && profile != "infer") {
    const std::string path = profile_dir + "/train_profile.json";
    const absl::Status status = core::ProfileSteps(
        absl::GetFlag(FLAGS_profile_steps),
        [&] {
          at::Tensor loss = at::zeros({});
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
  for (int step = 0; step <= steps; ++step) {
    const auto start = Clock::now();
    const std::vector<core::Sample> predictions = model.Predict(eval_batch);
    if (step > 0) times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
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
  return vision::models::mask_rcnn::Run();
}
