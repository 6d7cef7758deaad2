// DBNet-ResNet-18 on CUDA against the CPU, on fixed weights and one fixed batch (issue 29). In
// float32: the losses, the gradients of every parameter and the predictions (probability maps,
// text boxes); in float64 the losses and gradients again, which float32 can compare only
// loosely (see kFloat32GradientTolerance); under bfloat16 and float16 autocast, a few training
// steps that stay finite. The CUDA cases skip where no GPU is visible. The CPU case checks here
// what the tolerances are made of: the CPU's own float32 noise against float64, and the rounding
// of the loss the model computes in float32 even in a float64 run.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <torch/cuda.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include "core/batch.h"
#include "gtest/gtest.h"
#include "models/dbnet/db_loss.h"
#include "models/dbnet/dbnet.h"
#include "models/dbnet/dbnet.pb.h"
#include "models/dbnet/label_generator.h"
#include "models/testing/device_parity.h"
#include "models/testing/step_benchmark.h"

namespace vision::models::dbnet {
namespace {

namespace parity = ::vision::models::testing;

constexpr int kSize = 64;

// Tolerances (device_parity.h: relative to each entry's largest and rms expected magnitude,
// gradients with a floor of kGradientFloor of the model's largest gradient, so that the biases
// of convolutions under a BatchNorm, whose gradient is zero but for rounding, are measured
// against it). Each is kNoiseMargin times a bound on a measured noise; Float32NoiseTest prints
// the measurements (here with 1 and 2 threads, whose pretrained weights differ) and checks the
// bounds.
//  - float32 losses: CPU float32 against float64 <= 3.0e-6 -> bound 1e-5;
//  - float32 probability maps: max 1.2e-5, rms 1.0e-6 -> bound (5e-5, 5e-6);
//  - float32 gradients: CPU noise max 8.6e-5, rms 2.1e-5, but that run has no ReLU whose input
//    lies within rounding of 0. One that flips between two runs routes its gradient or not and
//    moves some parameters' gradients by up to 4% rms (measured by flipping each ReLU's input
//    nearest 0 in turn in ResNet-18 at this size); DANet's ResNet-50 flips about 30 in every
//    float32 run (danet_cuda_test). CUDA rounds differently, so a few flips there are likely:
//    bound (5e-2, 3e-2), which a flip or two stays under, and which catches what a device bug
//    does (a gradient of the wrong sign, a missing or doubled term, garbage);
//  - float64 losses and gradients: nothing flips at float64's rounding, but the balanced BCE is
//    computed in float32 in every run (db_loss.cc), and CPU and CUDA round it differently. Its
//    rounding, measured as the float64 run against the same run with the BCE in float64:
//    losses 7.7e-8, gradients max 2.5e-8, rms 1.5e-8. Each device rounds it once, so the
//    difference between the two is at most twice that: bounds 1e-6 for the losses, 2e-7 for the
//    gradients (Float32NoiseTest checks the measurement against half of them). Float64's own
//    rounding is 2^-29 of float32's, 1e-12 here.
// The margin covers CUDA's other summation orders and algorithms (cuDNN's Winograd and FFT
// convolutions round more than a direct convolution).
constexpr double kNoiseMargin = 10;
constexpr parity::Tolerance kFloat32LossTolerance = {1e-4, 1e-4};
constexpr parity::Tolerance kFloat32GradientTolerance = {0.5, 0.3};
constexpr parity::Tolerance kProbabilityTolerance = {5e-4, 5e-5};
constexpr parity::Tolerance kFloat64LossTolerance = {1e-5, 1e-5};
constexpr parity::Tolerance kFloat64GradientTolerance = {2e-6, 2e-6};
constexpr double kGradientFloor = 1e-2;

std::unique_ptr<DBNet> MakeModel() {
  DBNetOptions options;
  options.mutable_backbone()->set_type("ResNet18");
  absl::StatusOr<std::unique_ptr<DBNet>> model = DBNet::Create(options);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

// HxWx3 8-bit image -> [3, H, W] in [-1, 1].
at::Tensor ImageTensor(const cv::Mat& image) {
  cv::Mat as_float;
  image.convertTo(as_float, CV_32FC3, 1.0 / 127.5, -1.0);
  return at::from_blob(as_float.data, {image.rows, image.cols, 3}, at::kFloat)
      .permute({2, 0, 1})
      .clone();
}

at::Tensor MapTensor(const cv::Mat& map) {
  const at::ScalarType type = map.depth() == CV_8U ? at::kByte : at::kFloat;
  return at::from_blob(const_cast<uchar*>(map.data), {map.rows, map.cols}, type).clone();
}

// Two 64 x 64 images, each with two large text quadrilaterals on a noisy background, and their
// targets from the model's own generator. The text is large on purpose: the loss's hard-negative
// mining then takes every negative pixel (checked below), so no top-k choice among near-equal
// losses can differ between devices.
core::Batch MakeBatch(const DBNet& model) {
  const std::vector<std::vector<std::vector<cv::Point2f>>> quads = {
      {{{1, 2}, {62, 1}, {63, 30}, {2, 31}}, {{1, 34}, {63, 33}, {62, 62}, {2, 63}}},
      {{{2, 1}, {31, 2}, {30, 63}, {1, 62}}, {{34, 2}, {63, 1}, {62, 62}, {33, 63}}}};
  cv::RNG rng(29);
  core::Batch batch;
  std::vector<at::Tensor> images;
  std::map<std::string, std::vector<at::Tensor>> maps;
  for (size_t i = 0; i < quads.size(); ++i) {
    core::Sample sample;
    sample.id = "image" + std::to_string(i);
    sample.image = cv::Mat(kSize, kSize, CV_8UC3);
    rng.fill(sample.image, cv::RNG::UNIFORM, 0, 60);
    for (const std::vector<cv::Point2f>& quad : quads[i]) {
      std::vector<cv::Point> drawn(quad.begin(), quad.end());
      cv::Mat bright(kSize, kSize, CV_8UC3);
      rng.fill(bright, cv::RNG::UNIFORM, 180, 255);
      cv::Mat mask = cv::Mat::zeros(kSize, kSize, CV_8U);
      cv::fillConvexPoly(mask, drawn, cv::Scalar(255));
      bright.copyTo(sample.image, mask);
      core::TextInstance text;
      text.polygon.assign(quad.begin(), quad.end());
      sample.texts.push_back(text);
    }
    EXPECT_TRUE(model.MakeTargetGenerator()->Generate(&sample).ok());
    images.push_back(ImageTensor(sample.image));
    for (const auto& [name, map] : sample.targets) maps[name].push_back(MapTensor(map));
    sample.image.release();
    sample.targets.clear();
    sample.original_height = kSize;
    sample.original_width = kSize;
    batch.samples.push_back(sample);
  }
  batch.images = at::stack(images);
  batch.image_sizes = at::full({2, 2}, kSize, at::kLong);
  for (const auto& [name, list] : maps) batch.targets[name] = at::stack(list);
  return batch;
}

// The CPU model and batch every case starts from. The model first trains 20 SGD steps on the
// batch on the CPU, so that BatchNorm's running statistics are those of real activations and
// the probability map shows the text: eval-mode predictions of a fresh network are saturated.
struct Reference {
  std::unique_ptr<DBNet> model;
  core::Batch batch;
};

const Reference& GetReference() {
  static const Reference* reference = [] {
    auto* r = new Reference;
    at::manual_seed(0);
    r->model = MakeModel();
    if (r->model == nullptr) return r;
    r->batch = MakeBatch(*r->model);
    r->model->train();
    torch::optim::SGD sgd(r->model->parameters(), torch::optim::SGDOptions(0.02).momentum(0.9));
    for (int step = 0; step < 20; ++step) {
      sgd.zero_grad();
      at::Tensor total;
      for (const auto& [name, loss] : r->model->Losses(r->batch)) {
        total = total.defined() ? total + loss : loss;
      }
      total.backward();
      sgd.step();
    }
    return r;
  }();
  return *reference;
}

// A copy of the reference model on `device` in `dtype`.
std::unique_ptr<DBNet> CopyOf(const DBNet& model, const c10::Device& device, at::ScalarType dtype) {
  std::unique_ptr<DBNet> copy = MakeModel();
  if (copy == nullptr) return nullptr;
  EXPECT_TRUE(parity::CopyState(model, *copy));
  copy->to(device, dtype);
  return copy;
}

// Eval-mode outputs: the probability maps (float64, CPU) and the predicted texts.
struct Predictions {
  at::Tensor probability;
  std::vector<core::Sample> samples;
};

Predictions Predict(DBNet& model, const core::Batch& batch) {
  model.eval();
  Predictions p;
  {
    torch::NoGradGuard no_grad;
    p.probability =
        model.Forward(batch.images, /*with_threshold=*/false).probability.to(at::kCPU, at::kDouble);
  }
  p.samples = model.Predict(batch);
  return p;
}

// Pixels of `probability` within `band` of the binarisation threshold: where the binary map,
// hence the contours, may differ between two runs whose maps differ by up to `band`.
int64_t BorderlinePixels(const at::Tensor& probability, double threshold, double band) {
  return ((probability - threshold).abs() <= band).sum().item<int64_t>();
}

// Texts of `seen` against `expected`, image by image: the same number of quadrilaterals with
// corners within `corner_tolerance` pixels and scores within `score_tolerance`.
void ExpectSameTexts(const std::vector<core::Sample>& expected,
                     const std::vector<core::Sample>& seen, double corner_tolerance,
                     double score_tolerance) {
  ASSERT_EQ(expected.size(), seen.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE("image " + std::to_string(i));
    const std::vector<core::TextInstance>& e = expected[i].texts;
    const std::vector<core::TextInstance>& s = seen[i].texts;
    ASSERT_EQ(e.size(), s.size());
    for (size_t k = 0; k < e.size(); ++k) {
      ASSERT_EQ(e[k].polygon.size(), s[k].polygon.size()) << "text " << k;
      double worst = 0;
      for (size_t v = 0; v < e[k].polygon.size(); ++v) {
        worst = std::max({worst, std::abs(double{e[k].polygon[v].x} - s[k].polygon[v].x),
                          std::abs(double{e[k].polygon[v].y} - s[k].polygon[v].y)});
      }
      EXPECT_LE(worst, corner_tolerance) << "text " << k << ": corners moved by " << worst;
      EXPECT_NEAR(e[k].score, s[k].score, score_tolerance) << "text " << k;
    }
  }
}

// The losses as the model computes them but with the balanced BCE in float64 (BalancedBCELoss's
// arithmetic; the model's runs it in float32 on every device): the reference for that
// rounding.
std::map<std::string, at::Tensor> Float64Losses(DBNet& model, const core::Batch& batch) {
  const DBHeadOutput out = model.Forward(batch.images, /*with_threshold=*/true);
  const at::Tensor probability = out.probability.squeeze(1);
  const auto target = [&](const char* name) {
    return batch.targets.at(name).to(probability.options());
  };
  const at::Tensor gt = target(kGtTarget);
  const at::Tensor mask = target(kMaskTarget);
  const DBLossOptions& o = model.config().loss;
  const at::Tensor positive = gt * mask;
  const at::Tensor negative = (1 - gt) * mask;
  const auto positives = static_cast<int64_t>(positive.sum().item<double>());
  const int64_t negatives =
      std::min(static_cast<int64_t>(negative.sum().item<double>()),
               static_cast<int64_t>(static_cast<double>(positives) * o.ohem_negative_ratio));
  const at::Tensor bce = at::binary_cross_entropy(probability, gt, {}, at::Reduction::None);
  at::Tensor total = (bce * positive).sum();
  if (negatives > 0) {
    total = total + std::get<0>(at::topk((bce * negative).reshape(-1), negatives)).sum();
  }
  return {{"loss_prob", total / (static_cast<double>(positives + negatives) + o.eps)},
          {"loss_binary", o.alpha * DiceLoss(out.binary.squeeze(1), gt, mask, o.eps)},
          {"loss_thresh", o.beta * MaskedL1Loss(out.threshold.squeeze(1), target(kThreshMapTarget),
                                                target(kThreshMaskTarget))}};
}

// Losses and gradients of `seen` against `expected`.
void CompareSteps(const parity::StepResult& expected, const parity::StepResult& seen,
                  const parity::Tolerance& loss_tolerance,
                  const parity::Tolerance& gradient_tolerance) {
  parity::CompareSteps(
      expected, seen, loss_tolerance, gradient_tolerance, kGradientFloor, 3,
      {"backbone.conv1.weight", "backbone.layer2.0.conv1.weight", "backbone.layer4.1.conv2.weight",
       "neck.lateral0.weight", "head.probability.0.weight", "head.threshold.0.weight"});
}

// The hard-negative mining must take every negative (see MakeBatch).
void ExpectEveryNegativeTaken(const core::Batch& batch) {
  const at::Tensor gt = batch.targets.at(kGtTarget).to(at::kDouble);
  const at::Tensor mask = batch.targets.at(kMaskTarget).to(at::kDouble);
  const double positives = (gt * mask).sum().item<double>();
  const double negatives = ((1 - gt) * mask).sum().item<double>();
  ASSERT_LE(negatives, 3 * positives) << "the batch must have at most 3 negatives per positive";
}

// Eval-mode predictions `s` against `e` (made with post-processing `post`), the tolerance
// divided by `divisor`.
void ComparePredictions(const Predictions& e, const Predictions& s,
                        const PostProcessorOptions& post, double divisor) {
  const parity::Comparison maps({{"probability", e.probability}}, {{"probability", s.probability}},
                                0.0);
  const parity::Tolerance probability_tolerance = kProbabilityTolerance.Divided(divisor);
  std::cout << "probability maps: " << maps.Summary() << "\n" << maps.Report(probability_tolerance);
  EXPECT_TRUE(maps.Within(probability_tolerance, "probability maps"));
  const double band = probability_tolerance.max;
  const int64_t borderline = BorderlinePixels(e.probability, post.binary_threshold, band);
  int texts = 0;
  for (const core::Sample& sample : e.samples) texts += static_cast<int>(sample.texts.size());
  std::cout << texts << " texts; " << borderline << " pixels within " << band
            << " of the binarisation threshold\n";
  EXPECT_GT(texts, 0) << "the reference should find text";
  // With no pixel near the threshold both binary maps, hence the contours and the boxes, are
  // the same; one that is may move a contour by a pixel.
  ExpectSameTexts(e.samples, s.samples, borderline == 0 ? 1e-3 : 2.0, band);
}

void ComparePredictions(DBNet& expected_model, const core::Batch& expected_batch, DBNet& seen_model,
                        const core::Batch& seen_batch, double divisor) {
  ComparePredictions(Predict(expected_model, expected_batch), Predict(seen_model, seen_batch),
                     expected_model.config().post_process, divisor);
}

TEST(DBNetFloat32NoiseTest, CpuNoiseIsATenthOfTheTolerancesAtMost) {
  // One thread: the result is the same on every run, and OpenMP's spinning threads would slow
  // the tests that share CI's two cores.
  at::set_num_threads(1);
  const Reference& reference = GetReference();
  ASSERT_NE(reference.model, nullptr);
  ExpectEveryNegativeTaken(reference.batch);
  std::unique_ptr<DBNet> cpu32 = CopyOf(*reference.model, at::kCPU, at::kFloat);
  std::unique_ptr<DBNet> cpu64 = CopyOf(*reference.model, at::kCPU, at::kDouble);
  ASSERT_TRUE(cpu32 && cpu64);
  const core::Batch batch64 = parity::BatchOn(reference.batch, at::kCPU, at::kDouble);
  std::cout << "float32 against float64:\n";
  const parity::StepResult step64 = parity::LossesAndGradients(*cpu64, batch64);
  CompareSteps(step64, parity::LossesAndGradients(*cpu32, reference.batch),
               kFloat32LossTolerance.Divided(kNoiseMargin),
               kFloat32GradientTolerance.Divided(kNoiseMargin));
  ComparePredictions(*cpu64, batch64, *cpu32, reference.batch, kNoiseMargin);
  std::cout << "float64, the BCE in float32 (the model's) against float64:\n";
  std::unique_ptr<DBNet> exact = CopyOf(*reference.model, at::kCPU, at::kDouble);
  ASSERT_NE(exact, nullptr);
  CompareSteps(parity::GradientsOf(*exact, [&] { return Float64Losses(*exact, batch64); }), step64,
               kFloat64LossTolerance.Divided(2 * kNoiseMargin),
               kFloat64GradientTolerance.Divided(2 * kNoiseMargin));
}

// This test's model for the checks that every model's device test runs
// (models/testing/device_parity.h ModelChecks).
const parity::ModelChecks<DBNet, Predictions>& Checks() {
  static const auto* checks = new parity::ModelChecks<DBNet, Predictions>{
      GetReference().model.get(),
      &GetReference().batch,
      CopyOf,
      parity::StepsWithin(CompareSteps, kFloat32LossTolerance, kFloat32GradientTolerance,
                          kFloat64LossTolerance, kFloat64GradientTolerance),
      Predict,
      [](const Predictions& expected, const Predictions& seen, double divisor) {
        ComparePredictions(expected, seen, GetReference().model->config().post_process, divisor);
      },
      kNoiseMargin};
  return *checks;
}

TEST(DBNetCudaTest, Float32MatchesTheCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible";
  parity::UseIeeeFloat32OnCuda();
  parity::DeviceMatchesTheCpu(Checks(), c10::Device(at::kCUDA, 0), at::kFloat);
}

// TrainPipelineConfig.memory_format: channels-last weights and images take the contiguous
// model's training step and make its predictions within the float32 device tolerances (the
// layout reorders sums, as another device does), on the CPU and on CUDA.
TEST(DBNetChannelsLastTest, MatchesContiguousOnTheCpu) {
  at::set_num_threads(1);
  parity::ChannelsLastMatchesContiguous(Checks(), at::kCPU);
}

// TrainPipelineConfig.cpu_convolution WINOGRAD (models/ops/winograd_conv.h): the 3x3 stride-1
// convolutions of the ResNet, the FPN and the head by Winograd F(4x4, 3x3) take the same
// training step as ATen's convolutions. In float64 within the float64 device tolerances (the
// algorithms differ by 1e-13); in float32 within the float32 device tolerances, predictions
// included (Winograd rounds about 10x more than a direct convolution, as cuDNN's does).
TEST(DBNetWinogradTest, Float64StepMatchesATen) {
  at::set_num_threads(1);
  parity::WinogradMatchesATen(Checks(), at::kDouble);
}

TEST(DBNetWinogradTest, Float32StepAndPredictionsMatchATen) {
  at::set_num_threads(1);
  parity::WinogradMatchesATen(Checks(), at::kFloat);
}

TEST(DBNetCudaTest, ChannelsLastFloat32MatchesTheCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible";
  parity::UseIeeeFloat32OnCuda();
  parity::ChannelsLastMatchesContiguous(Checks(), c10::Device(at::kCUDA, 0));
}

TEST(DBNetCudaTest, Float64LossesAndGradientsMatchTheCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible";
  parity::DeviceMatchesTheCpu(Checks(), c10::Device(at::kCUDA, 0), at::kDouble);
}

TEST(DBNetCudaTest, Bfloat16AutocastStepsStayFinite) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible";
  parity::ExpectFiniteAutocastSteps(Checks(), c10::Device(at::kCUDA, 0), at::kBFloat16);
}

TEST(DBNetCudaTest, Float16AutocastStepsWithLossScalingStayFinite) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible";
  parity::ExpectFiniteAutocastSteps(Checks(), c10::Device(at::kCUDA, 0), at::kHalf);
}

// The loss on CUDA with the default mining (SORTED there) reads nothing on the host, forward or
// backward, and equals TOPK's, which reads the two counts (at least two synchronisations:
// which also shows that the counter sees them).
TEST(DBNetCudaTest, LossMakesNoHostSynchronisation) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible";
  const c10::Device cuda(c10::kCUDA, 0);
  at::manual_seed(11);
  const auto on_cuda = at::TensorOptions().device(cuda);
  const at::Tensor probability = at::rand({4, 160, 160}, on_cuda) * 0.98 + 0.01;
  DBTargets targets;
  targets.gt = (at::rand({4, 160, 160}, on_cuda) < 0.1).to(at::kFloat);
  targets.mask = (at::rand({4, 160, 160}, on_cuda) < 0.95).to(at::kFloat);
  targets.thresh_map = at::rand({4, 160, 160}, on_cuda);
  targets.thresh_mask = (at::rand({4, 160, 160}, on_cuda) < 0.3).to(at::kFloat);
  const at::Tensor threshold = at::rand({4, 160, 160}, on_cuda);
  double totals[2];
  int64_t syncs[2];
  std::string sites[2];
  int i = 0;
  for (HardNegativeMining mining : {HardNegativeMining::kAuto, HardNegativeMining::kTopK}) {
    DBLossOptions options;
    options.hard_negative_mining = mining;
    const at::Tensor p = probability.clone().set_requires_grad(true);
    const at::Tensor t = threshold.clone().set_requires_grad(true);
    torch::cuda::synchronize();
    at::Tensor total;
    {
      parity::SyncCounter counter(cuda);
      for (const auto& [name, loss] : DBLoss(p, t, p, targets, options)) {
        total = total.defined() ? total + loss : loss;
      }
      total.backward();
      syncs[i] = counter.count();
      for (const auto& [site, count] : counter.sites()) sites[i] += site + "; ";
    }
    totals[i++] = total.item<double>();
  }
  EXPECT_EQ(syncs[0], 0) << "AUTO (SORTED) on CUDA synchronised at: " << sites[0];
  EXPECT_GE(syncs[1], 2) << "TOPK on CUDA synchronised at: " << sites[1];
  EXPECT_NEAR(totals[0], totals[1], 1e-6 * std::abs(totals[1]));
}

}  // namespace
}  // namespace vision::models::dbnet
