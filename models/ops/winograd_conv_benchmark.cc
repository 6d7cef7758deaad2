// WinogradConv3x3 against ATen's convolution (oneDNN, as PyTorch runs it) on the 3x3 stride-1
// layers of DBNet-ResNet-18 at 640 x 640, batch 2: forward, and backward for both gradients,
// side by side in one process, alternating, best of --repeats. One intra-op thread unless
// --threads says otherwise.
//   bazel run -c opt //models/ops:winograd_conv_benchmark -- [--repeats=3] [--threads=1]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "core/host_memory.h"
#include "models/ops/winograd_conv.h"

ABSL_FLAG(int, repeats, 3, "timed runs per layer and side (best taken)");
ABSL_FLAG(int, threads, 1, "intra-op threads");
ABSL_FLAG(std::string, only, "", "time only the layers whose name starts with this");

namespace {

double Seconds(const std::function<void()>& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  at::set_num_threads(absl::GetFlag(FLAGS_threads));
  vision::core::RetainFreedHostMemory();  // as //tools:train runs
  struct Layer {
    const char* name;
    int64_t n, c, k, size;
  };
  // The stride-1 3x3 layers of DBNet-ResNet-18 at 640 x 640: ResNet stages, the FPN's smoothing
  // convolutions, the head's first convolution (both branches).
  const std::vector<Layer> layers = {
      {"layer1 (x4)", 2, 64, 64, 160},    {"layer2 (x3)", 2, 128, 128, 80},
      {"layer3 (x3)", 2, 256, 256, 40},   {"layer4 (x3)", 2, 512, 512, 20},
      {"smooth 1/4", 2, 256, 64, 160},    {"smooth 1/8", 2, 256, 64, 80},
      {"head conv (x2)", 2, 256, 64, 160}};
  std::printf("%-16s %23s %23s %9s\n", "layer [N,C,K,HW]", "ATen fwd / bwd (ms)",
              "Winograd fwd / bwd (ms)", "ratio");
  double total_aten = 0, total_ours = 0;
  for (const Layer& l : layers) {
    if (std::string(l.name).rfind(absl::GetFlag(FLAGS_only), 0) != 0) continue;
    const at::Tensor x = at::randn({l.n, l.c, l.size, l.size}).requires_grad_();
    const at::Tensor w = (at::randn({l.k, l.c, 3, 3}) * 0.05).requires_grad_();
    const at::Tensor r = at::randn({l.n, l.k, l.size, l.size});
    double best[2][2] = {{1e9, 1e9}, {1e9, 1e9}};
    for (int rep = 0; rep <= absl::GetFlag(FLAGS_repeats); ++rep) {
      for (int side = 0; side < 2; ++side) {
        at::Tensor y;
        const double forward = Seconds([&] {
          y = side == 0 ? at::conv2d(x, w, {}, 1, 1) : vision::models::ops::WinogradConv3x3(x, w);
        });
        const double backward = Seconds([&] { (y * r).sum().backward(); });
        x.mutable_grad().reset();
        w.mutable_grad().reset();
        if (rep == 0) continue;  // warm-up
        best[side][0] = std::min(best[side][0], forward);
        best[side][1] = std::min(best[side][1], backward);
      }
    }
    const double aten = best[0][0] + best[0][1], ours = best[1][0] + best[1][1];
    total_aten += aten;
    total_ours += ours;
    std::printf("%-16s %11.1f / %7.1f %11.1f / %7.1f %9.2f\n", l.name, 1e3 * best[0][0],
                1e3 * best[0][1], 1e3 * best[1][0], 1e3 * best[1][1], ours / aten);
  }
  std::printf("sum of the rows (each layer once): ATen %.3f s, Winograd %.3f s, ratio %.2f\n",
              total_aten, total_ours, total_ours / total_aten);
  return 0;
}
