// Peak memory and time of DBNet training steps (forward and backward): with and without
// activation checkpointing (benchmarks/activation_checkpointing.sh, each in its own process,
// as peak resident memory only grows within a process), and against the same network in
// Python PyTorch (benchmarks/dbnet_step.sh).
//   activation_memory_benchmark --size=640 --batch=2 --checkpoint=layer1,layer2,layer3,layer4
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "core/batch.h"
#include "core/model.h"
#include "engine/host_memory.h"
#include "models/dbnet/dbnet.pb.h"

ABSL_FLAG(int, size, 640, "square input size");
ABSL_FLAG(int, batch, 2, "images per step");
ABSL_FLAG(std::string, checkpoint, "", "comma-separated ResNet stages to checkpoint (layer1..4)");
ABSL_FLAG(std::string, backbone, "ResNet18", "registered backbone");
ABSL_FLAG(bool, retain_host_memory, true,
          "Keep freed host memory for reuse as //tools:train does (engine/host_memory.h)");
ABSL_FLAG(int, steps, 1, "timed forward+backward steps (after one untimed step when > 1)");

namespace {

double PeakResidentMiB() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  at::set_num_threads(1);
  if (absl::GetFlag(FLAGS_retain_host_memory)) vision::engine::RetainFreedHostMemory();
  vision::models::dbnet::DBNetOptions options;
  options.mutable_backbone()->set_type(absl::GetFlag(FLAGS_backbone));
  google::protobuf::Any any;
  any.PackFrom(options);
  auto made = vision::core::ModelRegistry::Get().Create("DBNet", any);
  if (!made.ok()) {
    std::fprintf(stderr, "%s\n", std::string(made.status().message()).c_str());
    return 1;
  }
  std::shared_ptr<vision::core::Model> model = std::move(made).value();
  std::vector<std::string> stages;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_checkpoint), ',', absl::SkipEmpty())) {
    stages.push_back("backbone." + std::string(s));
  }
  if (auto s = model->EnableActivationCheckpointing(stages); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 1;
  }
  model->train();
  const int n = absl::GetFlag(FLAGS_batch), size = absl::GetFlag(FLAGS_size);
  vision::core::Batch batch;
  batch.images = at::randn({n, 3, size, size});
  batch.targets["gt"] = (at::rand({n, size, size}) > 0.9).to(at::kFloat);
  batch.targets["mask"] = at::ones({n, size, size});
  batch.targets["thresh_map"] = at::rand({n, size, size}) * 0.4 + 0.3;
  batch.targets["thresh_mask"] = (at::rand({n, size, size}) > 0.5).to(at::kFloat);
  const double before = PeakResidentMiB();
  auto step = [&] {
    model->zero_grad();
    at::Tensor loss;
    for (const auto& [name, term] : model->Losses(batch)) loss = loss.defined() ? loss + term : term;
    loss.backward();
  };
  const int steps = absl::GetFlag(FLAGS_steps);
  if (steps > 1) step();  // warm-up: allocator and kernel caches
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / steps;
  std::printf("checkpoint [%s]: peak RSS %.0f MiB (%.0f MiB before the step), step %.3f s\n",
              absl::GetFlag(FLAGS_checkpoint).c_str(), PeakResidentMiB(), before, seconds);
  return 0;
}
