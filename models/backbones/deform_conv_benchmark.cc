// Cost of deformable convolutions in a training step: ResNet-50 forward and backward with plain
// 3x3 convolutions and with DCNv2 in layer2..layer4 (DBNet's setting), the two timed in
// alternation within one process so that machine load hits both alike.
//   bazel run -c opt //models/backbones:deform_conv_benchmark -- --size=320 --batch=1 --steps=5
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/utils.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "models/backbones/resnet.h"

ABSL_FLAG(int, size, 320, "square input size");
ABSL_FLAG(int, batch, 1, "images per step");
ABSL_FLAG(int, steps, 5, "timed steps per network, after one untimed warm-up step each");
ABSL_FLAG(int, threads, 1, "intra-op threads");

namespace vision::models::backbones {
namespace {

double StepMs(ResNet& net, const at::Tensor& images) {
  const auto start = std::chrono::steady_clock::now();
  net.zero_grad();
  at::Tensor loss;
  for (const at::Tensor& level : net.Forward(images)) {
    loss = loss.defined() ? loss + level.mean() : level.mean();
  }
  loss.backward();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

int Run() {
  at::set_num_threads(absl::GetFlag(FLAGS_threads));
  torch::manual_seed(0);
  std::vector<std::unique_ptr<ResNet>> nets;
  for (bool dcn : {false, true}) {
    ResNetConfig config(50);
    if (dcn) config.stage_with_dcn({false, true, true, true});
    absl::StatusOr<std::unique_ptr<ResNet>> net = MakeResNet(config);
    if (!net.ok()) {
      std::fprintf(stderr, "%s\n", std::string(net.status().message()).c_str());
      return 1;
    }
    (*net)->train();
    nets.push_back(*std::move(net));
  }
  const int size = absl::GetFlag(FLAGS_size);
  const at::Tensor images = at::randn({absl::GetFlag(FLAGS_batch), 3, size, size});
  for (auto& net : nets) StepMs(*net, images);
  std::vector<std::vector<double>> ms(2);
  for (int step = 0; step < absl::GetFlag(FLAGS_steps); ++step) {
    for (size_t i = 0; i < nets.size(); ++i) ms[i].push_back(StepMs(*nets[i], images));
  }
  const double plain = Median(ms[0]);
  const double dcn = Median(ms[1]);
  std::printf(
      "ResNet-50 forward+backward, batch %d, %dx%d, %d thread(s), median of %d steps:\n"
      "  plain 3x3 convolutions:  %8.1f ms\n"
      "  DCNv2 in layer2..layer4: %8.1f ms  (%.2fx)\n",
      absl::GetFlag(FLAGS_batch), size, size, absl::GetFlag(FLAGS_threads),
      absl::GetFlag(FLAGS_steps), plain, dcn, dcn / plain);
  return 0;
}

}  // namespace
}  // namespace vision::models::backbones

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return vision::models::backbones::Run();
}
