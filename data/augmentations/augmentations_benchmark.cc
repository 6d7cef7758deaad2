// Per-sample cost of a DBNet-style ICDAR2015 training pipeline on a 1280x720 image with 20
// quads, and of each step alone, to size the loader's worker threads.
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <opencv2/core.hpp>

#include "benchmark/benchmark.h"
#include "core/augmentation.h"
#include "core/sample.h"
#include "data/augmentations/augmentations.pb.h"
#include "data/augmentations/test_util.h"

namespace vision::data::augmentations {
namespace {

core::Sample IcdarLikeSample() {
  core::Sample sample;
  sample.id = "benchmark";
  sample.image = cv::Mat(720, 1280, CV_8UC3);
  cv::RNG(0).fill(sample.image, cv::RNG::UNIFORM, 0, 256);
  for (int k = 0; k < 20; ++k) {
    sample.texts.push_back({testing::Rect(40.0f + 60 * (k % 20), 30.0f + 30 * k, 50, 20), "w"});
  }
  return sample;
}

std::vector<std::pair<std::string, std::unique_ptr<google::protobuf::Message>>> Pipeline() {
  std::vector<std::pair<std::string, std::unique_ptr<google::protobuf::Message>>> steps;
  steps.emplace_back("RandomScale", std::make_unique<RandomScaleOptions>());
  auto flip = std::make_unique<HorizontalFlipOptions>();
  steps.emplace_back("HorizontalFlip", std::move(flip));
  steps.emplace_back("RandomRotate", std::make_unique<RandomRotateOptions>());
  steps.emplace_back("RandomCrop", std::make_unique<RandomCropOptions>());
  auto jitter = std::make_unique<ColorJitterOptions>();
  jitter->set_brightness(0.125);
  jitter->set_saturation(0.5);
  steps.emplace_back("ColorJitter", std::move(jitter));
  steps.emplace_back("Normalize", std::make_unique<NormalizeOptions>());
  return steps;
}

// Runs steps [first, last) of the pipeline; the earlier steps run untimed.
void RunSteps(benchmark::State& state, size_t first, size_t last) {
  std::vector<std::unique_ptr<core::Augmentation>> augmentations;
  for (const auto& [name, options] : Pipeline()) {
    augmentations.push_back(std::move(testing::MakeAugmentation(name, *options)).value());
  }
  const core::Sample source = IcdarLikeSample();
  uint64_t seed = 0;
  for (auto _ : state) {
    state.PauseTiming();
    core::Sample sample = source;
    sample.image = source.image.clone();
    std::mt19937_64 rng(seed++);
    for (size_t i = 0; i < first; ++i) (void)augmentations[i]->Apply(&sample, rng);
    state.ResumeTiming();
    for (size_t i = first; i < last; ++i) {
      if (!augmentations[i]->Apply(&sample, rng).ok()) state.SkipWithError("augmentation failed");
    }
  }
}

void BM_WholePipeline(benchmark::State& state) { RunSteps(state, 0, Pipeline().size()); }
BENCHMARK(BM_WholePipeline)->Unit(benchmark::kMillisecond);

void BM_Step(benchmark::State& state) {
  const size_t step = static_cast<size_t>(state.range(0));
  state.SetLabel(Pipeline()[step].first);
  RunSteps(state, step, step + 1);
}
BENCHMARK(BM_Step)->DenseRange(0, 5)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace vision::data::augmentations

BENCHMARK_MAIN();
