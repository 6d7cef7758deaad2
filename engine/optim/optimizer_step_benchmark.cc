// Milliseconds per optimizer step of each implementation (engine/optim/multi_tensor.h) on
// ResNet-50's parameter list (161 tensors, 25.6M values, in torchvision's order and shapes; two
// groups as the trainer makes them: weight decay on weights of 2+ dimensions, none on
// normalisation weights and biases), with seeded random values and gradients that both this
// binary and benchmarks/optimizer_step_peer.py draw from the same generator:
//   optimizer_step_benchmark --threads=1 --optimizers=sgd,adamw
//       --implementations=for_loop,foreach,fused --warmup=2 --repeats=10 --seed=0
// Prints "result <optimizer> <implementation> ms <median> check <sum of the parameters after
// every step>" per pair, which benchmarks/optimizer_step.sh sets beside torch.optim's.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/ops/randn.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "engine/optim/multi_tensor.h"

ABSL_FLAG(int, threads, 1, "intra-op threads (at::set_num_threads)");
ABSL_FLAG(std::string, optimizers, "sgd,adamw", "comma-separated: sgd, adam, adamw");
ABSL_FLAG(std::string, implementations, "for_loop,foreach,fused",
          "comma-separated: for_loop, foreach, fused");
ABSL_FLAG(int, warmup, 2, "untimed steps first (state allocation, caches)");
ABSL_FLAG(int, repeats, 10, "timed steps; the median is printed");
ABSL_FLAG(uint64_t, seed, 0, "seed of the parameters and gradients");

namespace vision::engine::optim {
namespace {

// torchvision's resnet50().parameters() shapes, in order.
std::vector<std::vector<int64_t>> ResNet50Shapes() {
  std::vector<std::vector<int64_t>> shapes = {{64, 3, 7, 7}, {64}, {64}};
  int64_t inplanes = 64;
  const int64_t planes_per_stage[] = {64, 128, 256, 512};
  const int blocks_per_stage[] = {3, 4, 6, 3};
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t planes = planes_per_stage[stage];
    for (int block = 0; block < blocks_per_stage[stage]; ++block) {
      shapes.push_back({planes, inplanes, 1, 1});
      shapes.insert(shapes.end(), {{planes}, {planes}});
      shapes.push_back({planes, planes, 3, 3});
      shapes.insert(shapes.end(), {{planes}, {planes}});
      shapes.push_back({planes * 4, planes, 1, 1});
      shapes.insert(shapes.end(), {{planes * 4}, {planes * 4}});
      if (block == 0) {
        shapes.push_back({planes * 4, inplanes, 1, 1});
        shapes.insert(shapes.end(), {{planes * 4}, {planes * 4}});
      }
      inplanes = planes * 4;
    }
  }
  shapes.insert(shapes.end(), {{1000, 2048}, {1000}});
  return shapes;
}

std::unique_ptr<torch::optim::Optimizer> Make(const std::string& name,
                                              const std::vector<at::Tensor>& params,
                                              Implementation implementation) {
  std::vector<at::Tensor> decay, no_decay;
  for (const at::Tensor& p : params) (p.dim() > 1 ? decay : no_decay).push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (name == "sgd") {
    auto options = [](double wd) {
      return std::make_unique<torch::optim::SGDOptions>(
          torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(wd));
    };
    groups.emplace_back(decay, options(1e-4));
    groups.emplace_back(no_decay, options(0));
    return std::make_unique<MultiTensorSGD>(groups, torch::optim::SGDOptions(0.1),
                                            implementation);
  }
  if (name == "adam") {
    auto options = [](double wd) {
      return std::make_unique<torch::optim::AdamOptions>(
          torch::optim::AdamOptions(1e-3).weight_decay(wd));
    };
    groups.emplace_back(decay, options(1e-4));
    groups.emplace_back(no_decay, options(0));
    return std::make_unique<MultiTensorAdam>(groups, torch::optim::AdamOptions(),
                                             implementation);
  }
  auto options = [](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(1e-3).weight_decay(wd));
  };
  groups.emplace_back(decay, options(0.05));
  groups.emplace_back(no_decay, options(0));
  return std::make_unique<MultiTensorAdamW>(groups, torch::optim::AdamWOptions(),
                                            implementation);
}

int Run() {
  at::set_num_threads(absl::GetFlag(FLAGS_threads));
  const std::vector<std::string> optimizers =
      absl::StrSplit(absl::GetFlag(FLAGS_optimizers), ',', absl::SkipEmpty());
  std::vector<Implementation> implementations;
  for (absl::string_view name :
       absl::StrSplit(absl::GetFlag(FLAGS_implementations), ',', absl::SkipEmpty())) {
    if (name == "for_loop") {
      implementations.push_back(Implementation::kForLoop);
    } else if (name == "foreach") {
      implementations.push_back(Implementation::kForeach);
    } else if (name == "fused") {
      implementations.push_back(Implementation::kFused);
    } else {
      std::fprintf(stderr, "--implementations: for_loop, foreach or fused, got '%s'\n",
                   std::string(name).c_str());
      return 2;
    }
  }
  for (const std::string& name : optimizers) {
    if (name != "sgd" && name != "adam" && name != "adamw") {
      std::fprintf(stderr, "--optimizers: sgd, adam or adamw, got '%s'\n", name.c_str());
      return 2;
    }
  }

  at::manual_seed(absl::GetFlag(FLAGS_seed));
  const std::vector<std::vector<int64_t>> shapes = ResNet50Shapes();
  std::vector<at::Tensor> initial, grads;
  int64_t values = 0;
  for (const auto& shape : shapes) initial.push_back(at::randn(shape));
  for (const auto& shape : shapes) grads.push_back(at::randn(shape));
  for (const at::Tensor& t : initial) values += t.numel();
  std::printf("params tensors %zu values %lld threads %d\n", shapes.size(),
              static_cast<long long>(values), at::get_num_threads());

  const int warmup = absl::GetFlag(FLAGS_warmup), repeats = absl::GetFlag(FLAGS_repeats);
  for (const std::string& name : optimizers) {
    for (Implementation implementation : implementations) {
      std::vector<at::Tensor> params;
      for (size_t i = 0; i < initial.size(); ++i) {
        params.push_back(initial[i].clone().requires_grad_(true));
        params.back().mutable_grad() = grads[i];
      }
      std::unique_ptr<torch::optim::Optimizer> optimizer = Make(name, params, implementation);
      for (int i = 0; i < warmup; ++i) optimizer->step();
      std::vector<double> ms;
      for (int i = 0; i < repeats; ++i) {
        const auto start = std::chrono::steady_clock::now();
        optimizer->step();
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                               start)
                         .count());
      }
      std::sort(ms.begin(), ms.end());
      double check = 0;
      for (const at::Tensor& p : params) check += p.detach().sum(at::kDouble).item<double>();
      std::string label = ImplementationName(implementation);
      std::printf("result %s %s ms %.3f check %.10e\n", absl::AsciiStrToUpper(name).c_str(),
                  label.c_str(), ms.empty() ? 0.0 : ms[ms.size() / 2], check);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace vision::engine::optim

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return vision::engine::optim::Run();
}
