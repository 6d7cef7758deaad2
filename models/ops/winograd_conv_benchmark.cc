// WinogradConv3x3 against ATen's convolution (oneDNN, as PyTorch runs it) on the 3x3 stride-1
// layers of DBNet-ResNet-18 at 640 x 640, batch 2, and on the dilated 3x3 layers of DANet's
// dilated ResNets (stage 3 dilated by 2, stage 4 by 4; ResNet-18 at the quick start's 128 x 128
// crops, batch 4, and ResNet-50's bottleneck layers at 512 x 512, batch 1): forward, and
// backward for both gradients, side by side in one process, alternating, best of --repeats.
// One intra-op thread unless --threads says otherwise.
//   bazel run -c opt //models/ops:winograd_conv_benchmark -- [--repeats=3] [--threads=1]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <utility>
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
    const char* model;
    const char* name;
    int64_t n, c, k, size, dilation;
  };
  // The stride-1 3x3 layers of DBNet-ResNet-18 at 640 x 640 (ResNet stages, the FPN's smoothing
  // convolutions, the head's first convolution, both branches); then DANet's dilated layers.
  const std::vector<Layer> layers = {{"dbnet18", "layer1 (x4)", 2, 64, 64, 160, 1},
                                     {"dbnet18", "layer2 (x3)", 2, 128, 128, 80, 1},
                                     {"dbnet18", "layer3 (x3)", 2, 256, 256, 40, 1},
                                     {"dbnet18", "layer4 (x3)", 2, 512, 512, 20, 1},
                                     {"dbnet18", "smooth 1/4", 2, 256, 64, 160, 1},
                                     {"dbnet18", "smooth 1/8", 2, 256, 64, 80, 1},
                                     {"dbnet18", "head conv (x2)", 2, 256, 64, 160, 1},
                                     {"danet18", "layer3 d2 (x3)", 4, 256, 256, 16, 2},
                                     {"danet18", "layer4 d4 (x3)", 4, 512, 512, 16, 4},
                                     {"danet50", "layer3 d2 (x6)", 1, 256, 256, 64, 2},
                                     {"danet50", "layer4 d4 (x3)", 1, 512, 512, 64, 4}};
  std::printf("%-7s %-15s %23s %23s %9s\n", "model", "layer", "ATen fwd / bwd (ms)",
              "Winograd fwd / bwd (ms)", "ratio");
  std::map<std::string, std::pair<double, double>> totals;  // model -> ATen, Winograd seconds
  for (const Layer& l : layers) {
    const std::string name = std::string(l.model) + " " + l.name;
    if (name.rfind(absl::GetFlag(FLAGS_only), 0) != 0) continue;
    const at::Tensor x = at::randn({l.n, l.c, l.size, l.size}).requires_grad_();
    const at::Tensor w = (at::randn({l.k, l.c, 3, 3}) * 0.05).requires_grad_();
    const at::Tensor r = at::randn({l.n, l.k, l.size, l.size});
    const int64_t d = l.dilation;
    double best[2][2] = {{1e9, 1e9}, {1e9, 1e9}};
    for (int rep = 0; rep <= absl::GetFlag(FLAGS_repeats); ++rep) {
      for (int side = 0; side < 2; ++side) {
        at::Tensor y;
        const double forward = Seconds([&] {
          y = side == 0 ? at::conv2d(x, w, {}, 1, d, d)
                        : vision::models::ops::WinogradConv3x3(x, w, {d, d});
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
    totals[l.model].first += aten;
    totals[l.model].second += ours;
    std::printf("%-7s %-15s %11.1f / %7.1f %11.1f / %7.1f %9.2f\n", l.model, l.name,
                1e3 * best[0][0], 1e3 * best[0][1], 1e3 * best[1][0], 1e3 * best[1][1],
                ours / aten);
  }
  for (const auto& [model, t] : totals) {
    std::printf("%s, sum of the rows (each layer once): ATen %.3f s, Winograd %.3f s, ratio %.2f\n",
                model.c_str(), t.first, t.second, t.second / t.first);
  }
  return 0;
}
