// Mask R-CNN R50-FPN on CUDA against the CPU, on fixed weights and one fixed batch (issue 29).
// In float32: the five losses, the gradients of every parameter and the detections with their
// masks; in float64 the losses and gradients again, which float32 can compare only loosely (see
// kFloat32GradientTolerance); under bfloat16 and float16 autocast, a few training steps that
// stay finite. The CUDA cases skip where no GPU is visible. The CPU case checks here what the
// tolerances are made of: the CPU's own float32 noise against float64.
//
// Every discrete choice is made the same on both devices, so that only rounding separates them:
//  - sampling takes every candidate (batch sizes per image larger than the candidates), so the
//    devices' different random draws (randperm on each device's generator) choose the same set,
//    as mask_rcnn_parity_test does;
//  - the RPN's box deltas are zero (its bbox_pred weights and bias are zeroed), so proposals are
//    the anchors exactly, integer boxes whose IoUs with the integer ground truth are the same
//    float on both devices: no proposal or RoI is labelled differently at a 0.7 / 0.5 threshold;
//  - NMS thresholds are 1 (nothing suppressed) in the RPN and the box head: NMS keeps or
//    suppresses a box (a discontinuous choice) by comparing scores and IoUs, and among thousands
//    of overlapping random-weight boxes a pair closer than rounding would be decided differently
//    without any bug. NMS's CUDA kernel is checked against the CPU by models/ops:nms_test;
//  - detections are compared as sets, and one may lack a counterpart only when its score is
//    within the score tolerance of a cut (the lowest score of a full list of
//    detections_per_image, or score_threshold).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <torch/cuda.h>
#include <torch/utils.h>

#include "core/batch.h"
#include "core/run_length_mask.h"
#include "gtest/gtest.h"
#include "models/backbones/resnet.pb.h"
#include "models/mask_rcnn/mask_rcnn.h"
#include "models/ops/paste_masks.h"
#include "models/testing/device_parity.h"

namespace vision::models::mask_rcnn {
namespace {

namespace parity = ::vision::models::testing;

constexpr int64_t kBig = 100000;
constexpr int64_t kBatchSize = 64;
constexpr int kNumClasses = 3;

// Tolerances (device_parity.h: relative to each entry's largest and rms expected magnitude,
// gradients with a floor of kGradientFloor of the model's largest gradient; boxes in pixels,
// scores and mask probabilities absolute). Each is kNoiseMargin times a bound on a measured
// noise; Float32NoiseTest prints the measurements (here with 1 and 2 threads) and checks the
// bounds.
//  - float32 losses: CPU float32 against float64 <= 6.6e-7 -> bound 3e-6;
//  - float32 detections: boxes 3.4e-5 px, scores 4.8e-7, mask probabilities 1.8e-4 -> bounds
//    1e-4 px, 2e-6, 5e-4;
//  - float32 gradients: CPU noise max 6.9e-4 (fc6, whose gradient sums 700 RoIs' products that
//    cancel), rms 1.4e-4, in a run where no ReLU input lies within rounding of 0. One that
//    flips between two runs routes its gradient or not and moves some parameters' gradients by
//    up to 4% rms (measured on ResNet-18, see dbnet_cuda_test); the heads' ReLUs may flip on
//    CUDA: bound (5e-2, 3e-2), which a flip or two stays under, and which catches what a
//    device bug does (a gradient of the wrong sign, a missing or doubled term, garbage);
//  - float64 losses and gradients: the whole step computes in float64 (Float32NoiseTest checks
//    the losses' types), whose rounding is 2^-29 of float32's: 1.3e-12 for the gradients and
//    1.2e-15 for the losses here -> bounds 1e-9 and 1e-11, and nothing flips.
// The margin covers CUDA's other summation orders and algorithms (cuDNN's Winograd and FFT
// convolutions round more than a direct convolution).
constexpr double kNoiseMargin = 10;
constexpr parity::Tolerance kFloat32LossTolerance = {3e-5, 3e-5};
constexpr parity::Tolerance kFloat32GradientTolerance = {0.5, 0.3};
constexpr parity::Tolerance kFloat64LossTolerance = {1e-10, 1e-10};
constexpr parity::Tolerance kFloat64GradientTolerance = {1e-8, 1e-8};
constexpr double kGradientFloor = 1e-2;
constexpr double kBoxTolerance = 1e-3;    // pixels
constexpr double kScoreTolerance = 2e-5;  // absolute
constexpr double kMaskProbabilityTolerance = 5e-3;
// CPU and CUDA pastes of the same mask probabilities (paste_masks.h) differ by rounding only.
constexpr double kPasteBand = 1e-5;

MaskRCNNOptions Options() {
  MaskRCNNOptions options;
  options.set_num_classes(kNumClasses);
  options.mutable_backbone()->set_type("ResNet50");
  backbones::ResNetOptions resnet;
  resnet.set_frozen_batchnorm(true);
  resnet.set_frozen_stages(-1);  // the stem and layer1 train too, so their gradients compare
  options.mutable_backbone()->mutable_options()->PackFrom(resnet);
  MaskRCNNOptions::Rpn* rpn = options.mutable_rpn();
  // One square anchor per location, 341 per image: the box head's two 1024-wide layers run on
  // every anchor (see below), a third of the default three aspect ratios' cost on the CPU.
  rpn->add_aspect_ratios(1.0);
  rpn->set_pre_nms_top_n_train(kBig);
  rpn->set_pre_nms_top_n_test(kBig);
  rpn->set_post_nms_top_n_train(kBig);
  rpn->set_post_nms_top_n_test(kBig);
  rpn->set_batch_size_per_image(kBig);
  rpn->set_nms_threshold(1.0);
  MaskRCNNOptions::RoiHeads* heads = options.mutable_roi_heads();
  heads->set_batch_size_per_image(kBig);
  heads->set_nms_threshold(1.0);
  // The mask head costs half a GMAC per RoI: 10 detections per image keep the CPU's side short.
  heads->set_detections_per_image(10);
  return options;
}

std::unique_ptr<MaskRCNN> MakeModel() {
  absl::StatusOr<std::unique_ptr<MaskRCNN>> model = MaskRCNN::Create(Options());
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

struct Object {
  std::vector<cv::Point> polygon;
  int64_t label;
};

// Two images in a 64 x 64 batch, the second 56 x 60 (padded), each with a larger object (RoIs
// of a few anchors match it at IoU >= 0.5) and a small one (only its ground-truth box does),
// whose polygons have integer corners, hence integer boxes. Few positive RoIs keep the mask
// head's cost (half a GMAC per RoI, forward) small on the CPU.
core::Batch MakeBatch() {
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{64, 64}, {56, 60}};
  const std::vector<std::vector<Object>> objects = {
      {{{{9, 10}, {33, 12}, {31, 35}, {11, 33}}, 0}, {{{40, 42}, {54, 44}, {47, 55}}, 2}},
      {{{{4, 6}, {26, 9}, {24, 34}, {6, 30}}, 1}, {{{38, 20}, {50, 22}, {49, 33}, {39, 32}}, 0}}};
  core::Batch batch;
  batch.images = at::randn({2, 3, kBatchSize, kBatchSize});
  batch.images[1].slice(1, sizes[1].first).zero_();
  batch.images[1].slice(2, sizes[1].second).zero_();
  batch.image_sizes =
      at::tensor({sizes[0].first, sizes[0].second, sizes[1].first, sizes[1].second}, at::kLong)
          .view({2, 2});
  for (size_t i = 0; i < objects.size(); ++i) {
    const auto [height, width] = sizes[i];
    std::vector<at::Tensor> boxes, masks;
    std::vector<int64_t> labels;
    for (const Object& object : objects[i]) {
      const cv::Rect r = cv::boundingRect(object.polygon);
      boxes.push_back(at::tensor({static_cast<float>(r.x), static_cast<float>(r.y),
                                  static_cast<float>(r.x + r.width - 1),
                                  static_cast<float>(r.y + r.height - 1)}));
      cv::Mat mask = cv::Mat::zeros(static_cast<int>(height), static_cast<int>(width), CV_8U);
      cv::fillPoly(mask, std::vector<std::vector<cv::Point>>{object.polygon}, cv::Scalar(1));
      masks.push_back(at::from_blob(mask.data, {height, width}, at::kByte).clone());
      labels.push_back(object.label);
    }
    batch.instances.push_back({{"boxes", at::stack(boxes)},
                               {"labels", at::tensor(labels, at::kLong)},
                               {"masks", at::stack(masks)}});
    core::Sample sample;
    sample.id = "image" + std::to_string(i);
    sample.original_height = static_cast<int>(height);
    sample.original_width = static_cast<int>(width);
    batch.samples.push_back(sample);
  }
  return batch;
}

struct Reference {
  std::unique_ptr<MaskRCNN> model;
  core::Batch batch;
};

// The CPU model and batch every case starts from: seeded random weights (frozen batch norms
// with their initial, identity statistics, as mask_rcnn_parity_test's) with the RPN's box
// deltas zeroed (see the top of the file).
const Reference& GetReference() {
  static const Reference* reference = [] {
    auto* r = new Reference;
    at::manual_seed(0);
    r->batch = MakeBatch();
    r->model = MakeModel();
    if (r->model == nullptr) return r;
    torch::NoGradGuard no_grad;
    for (auto& item : r->model->named_parameters()) {
      if (item.key().rfind("rpn.head.bbox_pred.", 0) == 0) item.value().zero_();
    }
    return r;
  }();
  return *reference;
}

std::unique_ptr<MaskRCNN> CopyOf(const MaskRCNN& model, const c10::Device& device,
                                 at::ScalarType dtype) {
  std::unique_ptr<MaskRCNN> copy = MakeModel();
  if (copy == nullptr) return nullptr;
  EXPECT_TRUE(parity::CopyState(model, *copy));
  copy->to(device, dtype);
  return copy;
}

std::vector<std::pair<int64_t, int64_t>> Sizes(const core::Batch& batch) {
  std::vector<std::pair<int64_t, int64_t>> sizes;
  for (int64_t i = 0; i < batch.image_sizes.size(0); ++i) {
    sizes.emplace_back(batch.image_sizes[i][0].item<int64_t>(),
                       batch.image_sizes[i][1].item<int64_t>());
  }
  return sizes;
}

// One image's detections on the host in float64.
struct HostDetections {
  at::Tensor boxes, scores, labels, mask_probs;
};

std::vector<HostDetections> Detect(MaskRCNN& model, const core::Batch& batch) {
  model.eval();
  torch::NoGradGuard no_grad;
  std::vector<HostDetections> out;
  for (const Detections& d : model.Detect(batch.images, Sizes(batch))) {
    out.push_back({d.boxes.to(at::kCPU, at::kDouble), d.scores.to(at::kCPU, at::kDouble),
                   d.labels.to(at::kCPU), d.mask_probs.to(at::kCPU, at::kDouble)});
  }
  return out;
}

// Every detection of `from` has a counterpart in `in` (same label, box within box_tolerance,
// score within score_tolerance; its mask probabilities are then compared), unless its score is
// within score_tolerance of a cut: the lowest score of a full list (detections_per_image of
// them) or score_threshold. Returns the largest differences seen.
struct SetMatch {
  int matched = 0;
  int at_a_cut = 0;
  double box = 0, score = 0, mask = 0;
};

SetMatch MatchDetections(const HostDetections& from, const HostDetections& in,
                         const RoiHeadsOptions& heads, double box_tolerance, double score_tolerance,
                         double mask_tolerance, const std::string& what) {
  SetMatch m;
  const int64_t count = from.boxes.size(0);
  const double lowest = count > 0 ? from.scores.min().item<double>() : 0.0;
  const bool full = count == heads.detections_per_image();
  for (int64_t r = 0; r < count; ++r) {
    const double score = from.scores[r].item<double>();
    int64_t best = -1;
    double best_box = 0;
    if (in.boxes.size(0) > 0) {
      const at::Tensor box_diff = (in.boxes - from.boxes[r]).abs().amax(1);
      const at::Tensor candidates =
          at::where(in.labels == from.labels[r], box_diff, at::full_like(box_diff, 1e9));
      best = candidates.argmin().item<int64_t>();
      best_box = candidates[best].item<double>();
    }
    const bool found = best >= 0 && best_box <= box_tolerance &&
                       std::abs(in.scores[best].item<double>() - score) <= score_tolerance;
    if (!found) {
      const bool near_cut = (full && score - lowest <= score_tolerance) ||
                            score - heads.score_threshold() <= score_tolerance;
      EXPECT_TRUE(near_cut) << what << ": detection " << r << " (label "
                            << from.labels[r].item<int64_t>() << ", score " << score << ", box "
                            << from.boxes[r] << ") has no counterpart; the nearest box of its "
                            << "label is " << best_box << " px away";
      ++m.at_a_cut;
      continue;
    }
    ++m.matched;
    m.box = std::max(m.box, best_box);
    m.score = std::max(m.score, std::abs(in.scores[best].item<double>() - score));
    const double mask = (in.mask_probs[best] - from.mask_probs[r]).abs().max().item<double>();
    m.mask = std::max(m.mask, mask);
    EXPECT_LE(mask, mask_tolerance) << what << ": mask probabilities of detection " << r;
  }
  return m;
}

// Predict's objects on the model's device against its own `detections` (Detect's, which the
// forward pass gives again: it is deterministic with cuDNN's deterministic algorithms): labels,
// boxes and scores, and each pasted mask as the CPU pastes the same probabilities into the same
// box (pixels within kPasteBand of the threshold may differ).
void ExpectPredictionsPasteTheDetections(MaskRCNN& model, const core::Batch& batch,
                                         const std::vector<HostDetections>& detections) {
  const std::vector<core::Sample> predictions = model.Predict(batch);
  ASSERT_EQ(predictions.size(), detections.size());
  for (size_t i = 0; i < predictions.size(); ++i) {
    SCOPED_TRACE("image " + std::to_string(i));
    const HostDetections& d = detections[i];
    const std::vector<core::ObjectInstance>& objects = predictions[i].objects;
    ASSERT_EQ(static_cast<int64_t>(objects.size()), d.boxes.size(0));
    if (objects.empty()) continue;
    const int64_t height = predictions[i].original_height;
    const int64_t width = predictions[i].original_width;
    // In float32, as Predict pastes a float32 model's detections: the box is grown and truncated
    // to whole pixels in the same arithmetic.
    const at::Tensor pasted = ops::PasteMasks(d.mask_probs.to(at::kFloat), d.boxes.to(at::kFloat),
                                              ops::PasteMasksOptions(height, width))
                                  .squeeze(1);
    int64_t differing = 0, near_threshold = 0;
    for (size_t k = 0; k < objects.size(); ++k) {
      const auto row = static_cast<int64_t>(k);
      const core::ObjectInstance& object = objects[k];
      EXPECT_EQ(object.label, d.labels[row].item<int64_t>() - 1) << k;
      EXPECT_NEAR(object.score, d.scores[row].item<double>(), 1e-6) << k;
      EXPECT_NEAR(object.box.x, d.boxes[row][0].item<double>(), 1e-3) << k;
      EXPECT_NEAR(object.box.y, d.boxes[row][1].item<double>(), 1e-3) << k;
      auto decoded = core::DecodeRle(object.rle);
      ASSERT_TRUE(decoded.ok()) << decoded.status();
      ASSERT_EQ(decoded->rows, height);
      ASSERT_EQ(decoded->cols, width);
      const at::Tensor mine = at::from_blob(decoded->data, {height, width}, at::kByte).ne(0);
      const at::Tensor expected = pasted[row] > model.config().mask_threshold;
      const at::Tensor differs = mine != expected;
      differing += differs.sum().item<int64_t>();
      const at::Tensor band = (pasted[row] - model.config().mask_threshold).abs() <= kPasteBand;
      near_threshold += (differs & band).sum().item<int64_t>();
    }
    EXPECT_EQ(differing, near_threshold)
        << differing << " pasted mask pixels differ from the CPU's paste of the same "
        << "probabilities, " << near_threshold << " of them within " << kPasteBand
        << " of the threshold";
  }
}

// Losses and gradients of `seen` against `expected`.
void CompareSteps(const parity::StepResult& expected, const parity::StepResult& seen,
                  const parity::Tolerance& loss_tolerance,
                  const parity::Tolerance& gradient_tolerance) {
  parity::CompareSteps(
      expected, seen, loss_tolerance, gradient_tolerance, kGradientFloor, 5,
      {"backbone.body.conv1.weight", "backbone.body.layer2.1.conv2.weight",
       "backbone.body.layer4.2.conv3.weight", "backbone.fpn.lateral0.weight",
       "backbone.fpn.smooth3.weight", "rpn.head.conv.weight", "rpn.head.cls_logits.weight",
       "rpn.head.bbox_pred.weight", "roi_heads.box_head.fc6.weight",
       "roi_heads.box_predictor.cls_score.weight", "roi_heads.box_predictor.bbox_pred.weight",
       "roi_heads.mask_head.mask_fcn1.weight", "roi_heads.mask_predictor.conv5_mask.weight",
       "roi_heads.mask_predictor.mask_fcn_logits.weight"});
}

// Detections `s` against `e` (each tolerance divided by `divisor`; `heads` made them).
void CompareDetections(const std::vector<HostDetections>& e, const std::vector<HostDetections>& s,
                       const RoiHeadsOptions& heads, double divisor) {
  ASSERT_EQ(e.size(), s.size());
  for (size_t i = 0; i < e.size(); ++i) {
    SCOPED_TRACE("image " + std::to_string(i));
    EXPECT_GT(e[i].boxes.size(0), 0) << "random weights give detections above 0.05";
    const SetMatch forward =
        MatchDetections(e[i], s[i], heads, kBoxTolerance / divisor, kScoreTolerance / divisor,
                        kMaskProbabilityTolerance / divisor, "expected");
    const SetMatch backward =
        MatchDetections(s[i], e[i], heads, kBoxTolerance / divisor, kScoreTolerance / divisor,
                        kMaskProbabilityTolerance / divisor, "seen");
    std::cout << "image " << i << ": " << forward.matched << " of " << e[i].boxes.size(0)
              << " expected and " << backward.matched << " of " << s[i].boxes.size(0)
              << " seen detections matched (" << forward.at_a_cut + backward.at_a_cut
              << " at a cut); largest differences: box " << forward.box << " px, score "
              << forward.score << ", mask probability " << forward.mask << "\n";
  }
}

// Detections of `seen` against `expected` (each tolerance divided by `divisor`), then the pasted
// masks of `seen`'s predictions.
void CompareDetections(MaskRCNN& expected_model, const core::Batch& expected_batch,
                       MaskRCNN& seen_model, const core::Batch& seen_batch, double divisor) {
  const std::vector<HostDetections> s = Detect(seen_model, seen_batch);
  CompareDetections(Detect(expected_model, expected_batch), s, expected_model.config().roi_heads,
                    divisor);
  ExpectPredictionsPasteTheDetections(seen_model, seen_batch, s);
}

TEST(MaskRcnnFloat32NoiseTest, CpuNoiseIsATenthOfTheTolerancesAtMost) {
  // One thread: the result is the same on every run, and OpenMP's spinning threads would slow
  // the tests that share CI's two cores.
  at::set_num_threads(1);
  const Reference& reference = GetReference();
  ASSERT_NE(reference.model, nullptr);
  std::unique_ptr<MaskRCNN> cpu32 = CopyOf(*reference.model, at::kCPU, at::kFloat);
  std::unique_ptr<MaskRCNN> cpu64 = CopyOf(*reference.model, at::kCPU, at::kDouble);
  ASSERT_TRUE(cpu32 && cpu64);
  const core::Batch batch64 = parity::BatchOn(reference.batch, at::kCPU, at::kDouble);
  const parity::StepResult step64 = parity::LossesAndGradients(*cpu64, batch64);
  for (const auto& [name, type] : step64.loss_types) {
    EXPECT_EQ(type, at::kDouble) << name << " is not computed in float64";
  }
  CompareSteps(step64, parity::LossesAndGradients(*cpu32, reference.batch),
               kFloat32LossTolerance.Divided(kNoiseMargin),
               kFloat32GradientTolerance.Divided(kNoiseMargin));
  CompareDetections(*cpu64, batch64, *cpu32, reference.batch, kNoiseMargin);
}

// This test's model for the checks that every model's device test runs
// (models/testing/device_parity.h ModelChecks).
const parity::ModelChecks<MaskRCNN, std::vector<HostDetections>>& Checks() {
  static const auto* checks = new parity::ModelChecks<MaskRCNN, std::vector<HostDetections>>{
      GetReference().model.get(),
      &GetReference().batch,
      CopyOf,
      parity::StepsWithin(CompareSteps, kFloat32LossTolerance, kFloat32GradientTolerance,
                          kFloat64LossTolerance, kFloat64GradientTolerance),
      Detect,
      [](const std::vector<HostDetections>& expected, const std::vector<HostDetections>& seen,
         double divisor) {
        CompareDetections(expected, seen, GetReference().model->config().roi_heads, divisor);
      },
      kNoiseMargin};
  return *checks;
}

TEST(MaskRcnnCudaTest, Float32MatchesTheCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible";
  parity::UseIeeeFloat32OnCuda();
  parity::DeviceMatchesTheCpu(Checks(), c10::Device(at::kCUDA, 0), at::kFloat);
}

// TrainPipelineConfig.memory_format: channels-last weights and images take the contiguous
// model's training step and make its detections within the float32 device tolerances (the
// layout reorders sums, as another device does), on the CPU and on CUDA.
TEST(MaskRcnnChannelsLastTest, MatchesContiguousOnTheCpu) {
  at::set_num_threads(1);
  parity::ChannelsLastMatchesContiguous(Checks(), at::kCPU);
}

// TrainPipelineConfig.cpu_convolution WINOGRAD (models/ops/winograd_conv.h): the ResNet-50
// body's 3x3 stride-1 convolutions by Winograd F(4x4, 3x3) (the FPN's, RPN's and mask head's
// carry biases and stay ATen's) take ATen's training step and make its detections: in float64
// within the float64 device tolerances, in float32 within the float32 ones.
TEST(MaskRcnnWinogradTest, Float64StepMatchesATen) {
  at::set_num_threads(1);
  parity::WinogradMatchesATen(Checks(), at::kDouble);
}

TEST(MaskRcnnWinogradTest, Float32StepAndDetectionsMatchATen) {
  at::set_num_threads(1);
  parity::WinogradMatchesATen(Checks(), at::kFloat);
}

TEST(MaskRcnnCudaTest, ChannelsLastFloat32MatchesTheCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible";
  parity::UseIeeeFloat32OnCuda();
  parity::ChannelsLastMatchesContiguous(Checks(), c10::Device(at::kCUDA, 0));
}

TEST(MaskRcnnCudaTest, Float64LossesAndGradientsMatchTheCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible";
  parity::DeviceMatchesTheCpu(Checks(), c10::Device(at::kCUDA, 0), at::kDouble);
}

TEST(MaskRcnnCudaTest, Bfloat16AutocastStepsStayFinite) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible";
  parity::ExpectFiniteAutocastSteps(Checks(), c10::Device(at::kCUDA, 0), at::kBFloat16);
}

TEST(MaskRcnnCudaTest, Float16AutocastStepsWithLossScalingStayFinite) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible";
  parity::ExpectFiniteAutocastSteps(Checks(), c10::Device(at::kCUDA, 0), at::kHalf);
}

}  // namespace
}  // namespace vision::models::mask_rcnn
