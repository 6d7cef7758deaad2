// Single-threaded speed of DBNet's label generation (label_generator.h), the step that
// starves the GPU in Python trainers. Prints images/s for 640 x 640 images with 12 random
// rotated quadrilaterals, next to the generator's own cost on the same images without text
// (initialising its four maps) and the cost of merely allocating and zeroing maps of the same
// types (three CV_8U, one CV_32F) with cv::Mat::zeros (memset: the floor any implementation
// with these map types pays).
//
//   bazel run -c opt //models/dbnet:label_generation_benchmark -- --images=64 --rounds=30
#include <chrono>
#include <cmath>
#include <ctime>
#include <cstdio>
#include <random>
#include <vector>

#include <opencv2/core.hpp>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "core/sample.h"
#include "models/dbnet/label_generator.h"

ABSL_FLAG(int, size, 640, "Image height and width in pixels.");
ABSL_FLAG(int, texts, 12, "Rotated quadrilaterals per image.");
ABSL_FLAG(int, images, 64, "Distinct random images, generated once.");
ABSL_FLAG(int, rounds, 30, "Passes over all images in each timed run.");
ABSL_FLAG(int, seed, 1, "Random seed.");

namespace vision::models::dbnet {
namespace {

std::vector<core::Sample> MakeSamples(int count, int size, int texts, int seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> center(0.1f * size, 0.9f * size);
  std::uniform_real_distribution<float> length(30.0f, 200.0f);
  std::uniform_real_distribution<float> thickness(10.0f, 50.0f);
  std::uniform_real_distribution<float> angle(-45.0f, 45.0f);
  std::bernoulli_distribution dont_care(0.1);
  std::vector<core::Sample> samples(count);
  for (core::Sample& sample : samples) {
    sample.image = cv::Mat(size, size, CV_8UC3, cv::Scalar(0, 0, 0));
    for (int t = 0; t < texts; ++t) {
      const cv::RotatedRect rect(cv::Point2f(center(rng), center(rng)),
                                 cv::Size2f(length(rng), thickness(rng)), angle(rng));
      cv::Point2f corners[4];
      rect.points(corners);
      core::TextInstance text;
      text.polygon.assign(corners, corners + 4);
      text.ignore = dont_care(rng);
      sample.texts.push_back(std::move(text));
    }
  }
  return samples;
}

// Wall and CPU time: the machine may be shared, and the question is what one core does.
struct Timer {
  std::chrono::steady_clock::time_point wall = std::chrono::steady_clock::now();
  std::clock_t cpu = std::clock();
  double WallSeconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count();
  }
  double CpuSeconds() const { return static_cast<double>(std::clock() - cpu) / CLOCKS_PER_SEC; }
};

int Run() {
  const int size = absl::GetFlag(FLAGS_size);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  std::vector<core::Sample> samples = MakeSamples(
      absl::GetFlag(FLAGS_images), size, absl::GetFlag(FLAGS_texts), absl::GetFlag(FLAGS_seed));
  const LabelGeneratorOptions options;
  const DBTargetGenerator generator(options);
  for (core::Sample& sample : samples) {  // warm-up, and a check that every sample works
    if (absl::Status status = generator.Generate(&sample); !status.ok()) {
      std::fprintf(stderr, "%s\n", std::string(status.message()).c_str());
      return 1;
    }
  }

  const Timer generate_timer;
  for (int r = 0; r < rounds; ++r) {
    for (core::Sample& sample : samples) (void)generator.Generate(&sample);
  }
  const double generate_s = generate_timer.CpuSeconds();
  const double generate_wall_s = generate_timer.WallSeconds();

  // The same generator on the same images without their text: what initialising the four
  // maps costs, so the remainder is the per-polygon work.
  std::vector<core::Sample> blank(samples.size());
  for (size_t i = 0; i < samples.size(); ++i) blank[i].image = samples[i].image;
  const Timer blank_timer;
  for (int r = 0; r < rounds; ++r) {
    for (core::Sample& sample : blank) (void)generator.Generate(&sample);
  }
  const double blank_s = blank_timer.CpuSeconds();

  const Timer floor_timer;
  for (int r = 0; r < rounds; ++r) {
    for (core::Sample& sample : samples) {
      for (auto& [name, map] : sample.targets) {
        // A new buffer, then the old one freed, as Generate does (assigning the MatExpr
        // straight to `map` would zero its buffer in place).
        cv::Mat fresh = cv::Mat::zeros(size, size, map.type());
        map = fresh;
      }
    }
  }
  const double floor_s = floor_timer.CpuSeconds();

  const double n = static_cast<double>(rounds) * samples.size();
  std::printf(
      "DBNet label generation, 1 thread: %dx%d images, %d rotated quads (~10%% don't-care), "
      "shrink_ratio %.2f, thresh [%.2f, %.2f], min_text_size %.0f; %.0f images timed\n",
      size, size, absl::GetFlag(FLAGS_texts), options.shrink_ratio, options.thresh_min,
      options.thresh_max, options.min_text_size, n);
  std::printf(
      "  label generation:     %8.1f images/s per CPU second (%.3f ms/image; wall "
      "clock %.1f images/s)\n",
      n / generate_s, 1e3 * generate_s / n, n / generate_wall_s);
  std::printf(
      "  same, images without text (map initialisation only): %8.1f images/s per CPU "
      "second (%.3f ms/image)\n",
      n / blank_s, 1e3 * blank_s / n);
  std::printf(
      "  allocate + zero only: %8.1f images/s per CPU second (%.3f ms/image); generation "
      "costs "
      "%.2fx this floor\n",
      n / floor_s, 1e3 * floor_s / n, generate_s / floor_s);
  return 0;
}

}  // namespace
}  // namespace vision::models::dbnet

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return vision::models::dbnet::Run();
}
