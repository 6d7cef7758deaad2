// Speed of the detection operators on CPU next to torchvision.ops, on inputs written by
// benchmarks/ops_peer.py (a plain dict saved with torch.save, so both sides time the same
// tensors): NMS of 5,000 boxes at IoU 0.7, and MultiScaleRoIAlign forward + backward of sum()
// for 512 RoIs over a 4-level 1x256 FPN of an 800x800 image (7x7, sampling ratio 2).
//   bash benchmarks/ops_vs_torchvision.sh [--threads=1,2]   (runs this and the Python peer)
//   ops_benchmark --inputs=PATH [--threads=1 --repeats=20 --warmup=3]
// Prints "nms_ms <median>", "roi_align_ms <median>" and checksums the peer prints as well.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>
#include <torch/serialize.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "models/ops/multi_scale_roi_align.h"
#include "models/ops/nms.h"

ABSL_FLAG(std::string, inputs, "", "torch.save'd dict written by benchmarks/ops_peer.py");
ABSL_FLAG(int, threads, 1, "intra-op threads (at::set_num_threads)");
ABSL_FLAG(int, repeats, 20, "timed runs per operator; the median is printed");
ABSL_FLAG(int, warmup, 3, "untimed runs per operator first");

namespace vision::models::ops {
namespace {

template <typename F>
double MedianMs(int warmup, int repeats, F&& run) {
  for (int i = 0; i < warmup; ++i) run();
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  return n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
}

int Main() {
  const std::string path = absl::GetFlag(FLAGS_inputs);
  TORCH_CHECK(!path.empty(), "--inputs is required");
  std::ifstream file(path, std::ios::binary);
  TORCH_CHECK(file, "cannot open ", path);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(file)),
                                std::istreambuf_iterator<char>());
  const c10::Dict<c10::IValue, c10::IValue> dict = torch::pickle_load(bytes).toGenericDict();
  const auto get = [&](const std::string& key) { return dict.at(key).toTensor(); };

  at::set_num_threads(absl::GetFlag(FLAGS_threads));
  const int warmup = absl::GetFlag(FLAGS_warmup);
  const int repeats = absl::GetFlag(FLAGS_repeats);

  const at::Tensor boxes = get("nms_boxes");
  const at::Tensor scores = get("nms_scores");
  at::Tensor keep;
  const double nms_ms = MedianMs(warmup, repeats, [&] { keep = Nms(boxes, scores, 0.7); });

  std::vector<at::Tensor> features;
  for (int level = 0; level < 4; ++level) {
    features.push_back(get("feat" + std::to_string(level)).clone().requires_grad_(true));
  }
  const std::vector<at::Tensor> rois = {get("rois")};
  const std::vector<std::pair<int64_t, int64_t>> image_sizes = {{800, 800}};
  const MultiScaleRoIAlignOptions options = MultiScaleRoIAlignOptions(7, 7).sampling_ratio(2);
  at::Tensor pooled;
  const double roi_ms = MedianMs(warmup, repeats, [&] {
    for (at::Tensor& f : features) f.mutable_grad() = at::Tensor();
    pooled = MultiScaleRoIAlign(features, rois, image_sizes, options);
    pooled.sum().backward();
  });

  double grad_sum = 0;
  for (const at::Tensor& f : features) grad_sum += f.grad().sum().item<double>();
  std::printf("threads %d\n", at::get_num_threads());
  std::printf("nms_ms %.3f\n", nms_ms);
  std::printf("roi_align_ms %.3f\n", roi_ms);
  std::printf("check nms_kept %lld keep_sum %lld pooled_sum %.4f grad_sum %.4f\n",
              static_cast<long long>(keep.numel()),
              static_cast<long long>(keep.sum().item<int64_t>()), pooled.sum().item<double>(),
              grad_sum);
  return 0;
}

}  // namespace
}  // namespace vision::models::ops

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return vision::models::ops::Main();
}
