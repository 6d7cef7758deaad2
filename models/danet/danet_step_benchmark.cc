// One DANet training step (forward, the three cross-entropy losses, backward, SGD update) on
// random images and labels, timed; benchmarks/danet_step.sh runs it next to the same network
// written in Python PyTorch (benchmarks/danet_peer.py) with the same sizes and threads.
// Not a test: speed is reported, never asserted.
#include <algorithm>
#include <chrono>
#include <sys/resource.h>
#include <cstdio>
#include <memory>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "core/batch.h"
#include "models/backbones/resnet.pb.h"
#include "models/danet/danet.h"
#include "models/danet/danet.pb.h"

ABSL_FLAG(int, depth, 18, "ResNet depth: 18, 34, 50 or 101 (output stride 8, multi-grid).");
ABSL_FLAG(int, height, 128, "Image height.");
ABSL_FLAG(int, width, 128, "Image width.");
ABSL_FLAG(int, batch, 4, "Images per step.");
ABSL_FLAG(int, steps, 5, "Timed steps (after one untimed warm-up step).");
ABSL_FLAG(int, threads, 1, "Intra-op threads.");
ABSL_FLAG(bool, checkpointing, false,
          "Recompute backbone.layer3/layer4 and both attention modules in backward.");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  using vision::models::danet::DANet;
  at::set_num_threads(absl::GetFlag(FLAGS_threads));
  torch::manual_seed(0);
  const int depth = absl::GetFlag(FLAGS_depth);
  vision::models::danet::DANetOptions options;
  options.set_num_classes(19);
  options.mutable_backbone()->set_type("ResNet" + std::to_string(depth));
  vision::models::backbones::ResNetOptions resnet;
  resnet.set_output_stride(8);
  for (int m : depth >= 50 ? std::vector<int>{1, 2, 4} : std::vector<int>{1, 2}) {
    resnet.add_multi_grid(m);
  }
  options.mutable_backbone()->mutable_options()->PackFrom(resnet);
  auto created = DANet::Create(options);
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", std::string(created.status().message()).c_str());
    return 1;
  }
  std::unique_ptr<DANet> model = *std::move(created);
  if (absl::GetFlag(FLAGS_checkpointing)) {
    const absl::Status s = model->EnableActivationCheckpointing(
        {"backbone.layer3", "backbone.layer4", "head.sa", "head.sc"});
    if (!s.ok()) return 1;
  }
  model->train();
  torch::optim::SGD optimizer(model->parameters(),
                              torch::optim::SGDOptions(0.01).momentum(0.9).weight_decay(1e-4));
  const int batch = absl::GetFlag(FLAGS_batch);
  const int height = absl::GetFlag(FLAGS_height);
  const int width = absl::GetFlag(FLAGS_width);
  vision::core::Batch data;
  data.images = at::randn({batch, 3, height, width});
  data.targets["semantic"] = at::randint(0, 19, {batch, height, width}, at::kLong).to(at::kByte);

  std::vector<double> seconds;
  double loss_value = 0;
  for (int step = 0; step <= absl::GetFlag(FLAGS_steps); ++step) {
    const auto start = std::chrono::steady_clock::now();
    optimizer.zero_grad();
    at::Tensor loss = at::zeros({});
    for (const auto& [name, term] : model->Losses(data)) loss = loss + term;
    loss.backward();
    optimizer.step();
    loss_value = loss.item<double>();
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (step > 0) seconds.push_back(elapsed);
  }
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
      usage.ru_maxrss / 1024.0, loss_value);
  return 0;
}
