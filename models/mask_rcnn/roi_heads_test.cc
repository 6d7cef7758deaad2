#include "models/mask_rcnn/roi_heads.h"

#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/cuda.h>

#include "gtest/gtest.h"
#include "models/ops/golden_for_test.h"

namespace vision::models::mask_rcnn {
namespace {

using ops::LoadGoldenCases;
using ops::MaxDiff;

constexpr char kGolden[] = "models/mask_rcnn/testdata/roi_heads_golden.pth";

std::map<std::string, at::Tensor> Golden(const std::string& op, const std::string& name) {
  return LoadGoldenCases(op, kGolden).at(name);
}

TEST(RoiHeadsTest, ParametersCarryTorchvisionNames) {
  const RoiHeads heads(RoiHeadsOptions()
                           .in_channels(8)
                           .num_classes(5)
                           .representation_size(16)
                           .mask_head_channels({6, 7}));
  const std::map<std::string, std::vector<int64_t>> expected = {
      {"box_head.fc6.weight", {16, 8 * 7 * 7}},
      {"box_head.fc6.bias", {16}},
      {"box_head.fc7.weight", {16, 16}},
      {"box_head.fc7.bias", {16}},
      {"box_predictor.cls_score.weight", {5, 16}},
      {"box_predictor.cls_score.bias", {5}},
      {"box_predictor.bbox_pred.weight", {20, 16}},
      {"box_predictor.bbox_pred.bias", {20}},
      {"mask_head.mask_fcn1.weight", {6, 8, 3, 3}},
      {"mask_head.mask_fcn1.bias", {6}},
      {"mask_head.mask_fcn2.weight", {7, 6, 3, 3}},
      {"mask_head.mask_fcn2.bias", {7}},
      {"mask_predictor.conv5_mask.weight", {7, 7, 2, 2}},
      {"mask_predictor.conv5_mask.bias", {7}},
      {"mask_predictor.mask_fcn_logits.weight", {5, 7, 1, 1}},
      {"mask_predictor.mask_fcn_logits.bias", {5}},
  };
  std::map<std::string, std::vector<int64_t>> actual;
  for (const auto& p : heads->named_parameters()) actual[p.key()] = p.value().sizes().vec();
  EXPECT_EQ(actual, expected);

  const RoiHeads boxes_only(RoiHeadsOptions().in_channels(8).masks(false));
  for (const auto& p : boxes_only->named_parameters()) {
    EXPECT_EQ(p.key().rfind("box_", 0), 0u) << p.key();
  }
  EXPECT_EQ(boxes_only->named_parameters().size(), 8u);
}

// torchvision's initialisation at the paper's widths: the mask convolutions kaiming-normal
// (fan out, ReLU gain) with zero biases; the predictor's weights kaiming-normal too.
TEST(RoiHeadsTest, MaskBranchInitialisedAsTorchvision) {
  at::manual_seed(3);
  const RoiHeads heads(RoiHeadsOptions().in_channels(256).representation_size(8));
  const auto expect_kaiming_fan_out = [](const at::Tensor& w) {
    const int64_t fan_out = w.size(0) * w[0][0].numel();
    const double expected = std::sqrt(2.0 / static_cast<double>(fan_out));
    EXPECT_NEAR(w.std().item<double>(), expected, 0.03 * expected) << w.sizes();
    EXPECT_NEAR(w.mean().item<double>(), 0.0, 0.05 * expected) << w.sizes();
  };
  ASSERT_EQ(heads->mask_fcn.size(), 4u);
  for (const auto& conv : heads->mask_fcn) {
    expect_kaiming_fan_out(conv->weight);
    EXPECT_EQ(conv->bias.abs().max().item<double>(), 0.0);
  }
  expect_kaiming_fan_out(heads->conv5_mask->weight);
  expect_kaiming_fan_out(heads->mask_fcn_logits->weight);
}

// An 8 x 8 mask whose left half (x < 4) is 1. Without RoIAlign's alignment, pixel j sits at
// coordinate j, so a sample at x = 3.5 reads half of pixel 3 and half of pixel 4, and samples
// below x = -1 read 0. At resolution 2 over [0, 0, 4, 8] the 2 x 4 samples per bin sit at
// x = 0.5, 1.5 | 2.5, 3.5: bins 1 and (1 + 0.5) / 2. Over [-4, 0, 4, 8] (half outside the image)
// at x = -3.5 .. -0.5 | 0.5 .. 3.5: bins (0 + 0 + 0 + 1) / 4 and (1 + 1 + 1 + 0.5) / 4. The
// second ground truth is empty, so its box's target is 0.
TEST(RoiHeadsTest, MaskTargetsByHand) {
  at::Tensor masks = at::zeros({2, 8, 8}, at::kByte);
  masks[0].slice(1, 0, 4).fill_(1);
  const at::Tensor boxes =
      at::tensor({0.f, 0.f, 4.f, 8.f, -4.f, 0.f, 4.f, 8.f, 0.f, 0.f, 4.f, 8.f}).view({3, 4});
  const at::Tensor matched = at::tensor({0, 0, 1}, at::kLong);
  const at::Tensor expected =
      at::tensor({1.f, 0.75f, 1.f, 0.75f, 0.25f, 0.875f, 0.25f, 0.875f, 0.f, 0.f, 0.f, 0.f})
          .view({3, 2, 2});
  EXPECT_LT(MaxDiff(MaskTargets(masks, boxes, matched, 2), expected), 1e-6);

  const at::Tensor none = MaskTargets(masks, at::zeros({0, 4}), at::zeros({0}, at::kLong), 28);
  EXPECT_EQ(none.sizes(), (std::vector<int64_t>{0, 28, 28}));
}

TEST(RoiHeadsTest, MaskTargetsMatchTorchvision) {
  const auto inputs = Golden("mask_targets", "inputs");
  for (const char* name : {"m28", "m7"}) {
    SCOPED_TRACE(name);
    const auto t = Golden("mask_targets", name);
    const at::Tensor targets =
        MaskTargets(inputs.at("gt_masks"), inputs.at("boxes"), inputs.at("matched"),
                    t.at("resolution").item<int64_t>());
    EXPECT_LT(MaxDiff(targets, t.at("targets")), 1e-6);
  }
}

// The golden file's RoI heads, weights and inputs on `device` in `dtype` (the golden is float;
// double, the model's parity precision, matches it within the same tolerances).
struct GoldenSetup {
  RoiHeads heads{nullptr};
  std::vector<at::Tensor> features;
  std::vector<std::pair<int64_t, int64_t>> image_sizes;
};

// masks = false: a Faster R-CNN with the golden file's box branch.
GoldenSetup LoadSetup(const at::Device& device, bool masks = true,
                      at::ScalarType dtype = at::kFloat) {
  const auto config = Golden("config", "heads");
  GoldenSetup s;
  s.heads = RoiHeads(RoiHeadsOptions()
                         .in_channels(config.at("in_channels").item<int64_t>())
                         .num_classes(config.at("num_classes").item<int64_t>())
                         .representation_size(config.at("representation_size").item<int64_t>())
                         .mask_head_channels(std::vector<int64_t>(
                             config.at("mask_head_channels").data_ptr<int64_t>(),
                             config.at("mask_head_channels").data_ptr<int64_t>() +
                                 config.at("mask_head_channels").numel()))
                         .score_threshold(config.at("score_threshold").item<double>())
                         .nms_threshold(config.at("nms_threshold").item<double>())
                         .detections_per_image(config.at("detections_per_image").item<int64_t>())
                         .masks(masks));
  const auto weights = LoadGoldenCases("weights", kGolden);
  size_t loaded = 0;
  {
    torch::NoGradGuard no_grad;
    for (auto& p : s.heads->named_parameters()) {
      const std::string& key = p.key();
      const size_t dot = key.rfind('.');
      const at::Tensor& w = weights.at(key.substr(0, dot)).at(key.substr(dot + 1));
      EXPECT_EQ(p.value().sizes(), w.sizes()) << key;
      p.value().copy_(w);
      ++loaded;
    }
  }
  size_t golden_count = 0;
  for (const auto& [module, tensors] : weights) {
    if (masks || module.rfind("box_", 0) == 0) golden_count += tensors.size();
  }
  EXPECT_EQ(loaded, golden_count) << "torchvision has parameters we lack";
  s.heads->to(device, dtype);

  const auto f = Golden("features", "batch");
  for (const char* level : {"p2", "p3", "p4", "p5"}) {
    s.features.push_back(f.at(level).to(device, dtype));
  }
  const at::Tensor sizes = f.at("image_sizes");
  for (int64_t i = 0; i < sizes.size(0); ++i) {
    s.image_sizes.emplace_back(sizes[i][0].item<int64_t>(), sizes[i][1].item<int64_t>());
  }
  return s;
}

void ExpectDetectionsMatchTorchvision(const at::Device& device, at::ScalarType dtype) {
  GoldenSetup s = LoadSetup(device, /*masks=*/true, dtype);
  s.heads->eval();
  const auto golden = Golden("eval", "batch");
  std::vector<at::Tensor> proposals;
  for (int i = 0; i < 2; ++i) {
    proposals.push_back(golden.at("proposals" + std::to_string(i)).to(device, dtype));
  }
  torch::NoGradGuard no_grad;
  const RoiHeadsOutput out = s.heads->forward(s.features, proposals, s.image_sizes, nullptr);
  EXPECT_TRUE(out.losses.empty());
  ASSERT_EQ(out.detections.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    const std::string n = std::to_string(i);
    const Detections& d = out.detections[i];
    EXPECT_EQ(d.boxes.device(), device);
    ASSERT_TRUE(at::equal(d.labels.cpu(), golden.at("labels" + n)))
        << d.labels << "\nexpected " << golden.at("labels" + n);
    EXPECT_LT(MaxDiff(d.boxes, golden.at("boxes" + n)), 1e-3);
    EXPECT_LT(MaxDiff(d.scores, golden.at("scores" + n)), 1e-4);
    EXPECT_LT(MaxDiff(d.mask_probs, golden.at("mask_probs" + n)), 1e-4);
  }
}

TEST(RoiHeadsTest, DetectionsMatchTorchvision) {
  ExpectDetectionsMatchTorchvision(at::kCPU, at::kFloat);
}

TEST(RoiHeadsTest, DetectionsMatchTorchvisionInDouble) {
  ExpectDetectionsMatchTorchvision(at::kCPU, at::kDouble);
}

TEST(RoiHeadsTest, DetectionsMatchTorchvisionOnCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible";
  ExpectDetectionsMatchTorchvision(at::Device(at::kCUDA, 0), at::kFloat);
}

void ExpectLossesMatchTorchvision(const at::Device& device, at::ScalarType dtype) {
  GoldenSetup s = LoadSetup(device, /*masks=*/true, dtype);
  s.heads->train();
  const auto targets_golden = Golden("targets", "batch");
  for (const char* case_name : {"both", "one_empty", "no_positive"}) {
    SCOPED_TRACE(case_name);
    const auto golden = Golden("train", case_name);
    std::vector<at::Tensor> proposals;
    std::vector<InstanceTargets> targets;
    for (int i = 0; i < 2; ++i) {
      const std::string n = std::to_string(i);
      proposals.push_back(golden.at("proposals" + n).to(device, dtype));
      const auto [height, width] = s.image_sizes[i];
      if (golden.at("has_gt")[i].item<bool>()) {
        targets.push_back({targets_golden.at("gt_boxes" + n).to(device, dtype),
                           targets_golden.at("gt_labels" + n).to(device),
                           targets_golden.at("gt_masks" + n).to(device)});
      } else {
        targets.push_back({at::zeros({0, 4}, at::device(device).dtype(dtype)),
                           at::zeros({0}, at::device(device).dtype(at::kLong)),
                           at::zeros({0, height, width}, at::device(device).dtype(at::kByte))});
      }
    }
    std::vector<at::Tensor> features;
    for (const at::Tensor& f : s.features) features.push_back(f.clone().requires_grad_(true));
    s.heads->zero_grad();
    const RoiHeadsOutput out = s.heads->forward(features, proposals, s.image_sizes, &targets);
    EXPECT_TRUE(out.detections.empty());
    ASSERT_EQ(out.losses.size(), 3u);
    for (const char* name : {"loss_classifier", "loss_box_reg", "loss_mask"}) {
      const double expected = golden.at(name).item<double>();
      EXPECT_NEAR(out.losses.at(name).item<double>(), expected, 1e-4 * std::abs(expected) + 1e-12)
          << name;
    }
    (out.losses.at("loss_classifier") + out.losses.at("loss_box_reg") + out.losses.at("loss_mask"))
        .backward();
    const std::map<std::string, at::Tensor> grads = {
        {"grad_fc6", s.heads->fc6->weight.grad()},
        {"grad_cls_score", s.heads->cls_score->weight.grad()},
        {"grad_mask_fcn1", s.heads->mask_fcn[0]->weight.grad()},
        {"grad_mask_fcn_logits", s.heads->mask_fcn_logits->weight.grad()},
        {"grad_p2", features[0].grad()},
        {"grad_p3", features[1].grad()},
        {"grad_p4", features[2].grad()},
        {"grad_p5", features[3].grad()}};
    for (const auto& [name, grad] : grads) {
      if (golden.count(name) == 0) continue;
      ASSERT_TRUE(grad.defined()) << name;
      EXPECT_LT(MaxDiff(grad, golden.at(name)), 1e-4) << name;
    }
    if (std::string(case_name) == "no_positive") {
      // Data-parallel ranks reduce every parameter's gradient, so the mask branch must have
      // defined (zero) ones even where no RoI is positive.
      EXPECT_EQ(out.losses.at("loss_mask").item<double>(), 0.0);
      for (const auto& p : s.heads->named_parameters()) {
        if (p.key().rfind("mask_", 0) != 0) continue;
        ASSERT_TRUE(p.value().grad().defined()) << p.key();
        EXPECT_EQ(p.value().grad().abs().max().item<double>(), 0.0) << p.key();
      }
    }
  }
}

TEST(RoiHeadsTest, LossesAndGradientsMatchTorchvision) {
  ExpectLossesMatchTorchvision(at::kCPU, at::kFloat);
}

TEST(RoiHeadsTest, LossesAndGradientsMatchTorchvisionInDouble) {
  ExpectLossesMatchTorchvision(at::kCPU, at::kDouble);
}

TEST(RoiHeadsTest, LossesAndGradientsMatchTorchvisionOnCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible";
  ExpectLossesMatchTorchvision(at::Device(at::kCUDA, 0), at::kFloat);
}

// Without the mask branch the box branch computes what torchvision's does with it: the same
// detections (no mask probabilities) and the same box losses, and no loss_mask.
TEST(RoiHeadsTest, WithoutMasksTheBoxBranchMatchesTorchvision) {
  GoldenSetup s = LoadSetup(at::kCPU, /*masks=*/false);
  const auto eval = Golden("eval", "batch");
  {
    s.heads->eval();
    torch::NoGradGuard no_grad;
    const RoiHeadsOutput out = s.heads->forward(
        s.features, {eval.at("proposals0"), eval.at("proposals1")}, s.image_sizes, nullptr);
    ASSERT_EQ(out.detections.size(), 2u);
    for (int i = 0; i < 2; ++i) {
      SCOPED_TRACE(i);
      const std::string n = std::to_string(i);
      EXPECT_TRUE(at::equal(out.detections[i].labels, eval.at("labels" + n)));
      EXPECT_LT(MaxDiff(out.detections[i].boxes, eval.at("boxes" + n)), 1e-3);
      EXPECT_LT(MaxDiff(out.detections[i].scores, eval.at("scores" + n)), 1e-4);
      EXPECT_FALSE(out.detections[i].mask_probs.defined());
    }
  }
  s.heads->train();
  const auto train = Golden("train", "both");
  const auto gt = Golden("targets", "batch");
  const std::vector<InstanceTargets> targets = {{gt.at("gt_boxes0"), gt.at("gt_labels0"), {}},
                                                {gt.at("gt_boxes1"), gt.at("gt_labels1"), {}}};
  const RoiHeadsOutput out = s.heads->forward(
      s.features, {train.at("proposals0"), train.at("proposals1")}, s.image_sizes, &targets);
  ASSERT_EQ(out.losses.size(), 2u);
  for (const char* name : {"loss_classifier", "loss_box_reg"}) {
    const double expected = train.at(name).item<double>();
    EXPECT_NEAR(out.losses.at(name).item<double>(), expected, 1e-4 * expected) << name;
  }
}

// More candidates than batch_size_per_image: 16 sampled RoIs, a quarter positive. With zero
// class weights and biases (1, 0, 0, 0) every negative's cross-entropy is log(e + 3) - 1 and
// every positive's log(e + 3), so the loss's mean reveals the sampled mix: log(e + 3) - 3/4
// for 4 positives and 12 negatives. With one positive candidate only (the ground truth
// itself), it is 1 positive and 15 negatives.
TEST(RoiHeadsTest, SamplingKeepsThePositiveFraction) {
  at::manual_seed(11);
  RoiHeads heads(RoiHeadsOptions()
                     .in_channels(2)
                     .num_classes(4)
                     .representation_size(8)
                     .mask_head_channels({2})
                     .batch_size_per_image(16)
                     .positive_fraction(0.25));
  {
    torch::NoGradGuard no_grad;
    heads->cls_score->weight.zero_();
    heads->cls_score->bias.copy_(at::tensor({1.f, 0.f, 0.f, 0.f}));
  }
  std::vector<at::Tensor> features;
  for (int64_t size : {16, 8, 4, 2}) features.push_back(at::randn({1, 2, size, size}));
  const at::Tensor gt = at::tensor({10.f, 10.f, 40.f, 40.f}).view({1, 4});
  const at::Tensor far = at::tensor({45.f, 45.f, 60.f, 60.f}).view({1, 4}).repeat({40, 1});
  const std::vector<InstanceTargets> targets = {
      {gt, at::tensor({2}, at::kLong), at::ones({1, 64, 64}, at::kByte)}};
  const double log_sum = std::log(std::exp(1.0) + 3.0);
  for (const int64_t near_copies : {30, 0}) {
    SCOPED_TRACE(near_copies);
    const at::Tensor proposals = at::cat({gt.repeat({near_copies, 1}) + 1.0f, far});
    const RoiHeadsOutput out = heads->forward(features, {proposals}, {{64, 64}}, &targets);
    const double positives = near_copies > 0 ? 4.0 : 1.0;
    EXPECT_NEAR(out.losses.at("loss_classifier").item<double>(), log_sum - (16 - positives) / 16,
                1e-6);
  }
}

// No detection survives (a threshold no softmax score exceeds) and the second image has no
// proposals: every output is empty with its documented shape and dtype.
TEST(RoiHeadsTest, EmptyDetectionsAreShapedTensors) {
  GoldenSetup s = LoadSetup(at::kCPU);
  RoiHeads heads(RoiHeadsOptions(s.heads->options()).score_threshold(1.0));
  heads->eval();
  const auto golden = Golden("eval", "batch");
  torch::NoGradGuard no_grad;
  const RoiHeadsOutput out = heads->forward(
      s.features, {golden.at("proposals0"), at::zeros({0, 4})}, s.image_sizes, nullptr);
  ASSERT_EQ(out.detections.size(), 2u);
  for (const Detections& d : out.detections) {
    EXPECT_EQ(d.boxes.sizes(), (std::vector<int64_t>{0, 4}));
    EXPECT_EQ(d.scores.sizes(), (std::vector<int64_t>{0}));
    EXPECT_EQ(d.labels.sizes(), (std::vector<int64_t>{0}));
    EXPECT_EQ(d.labels.scalar_type(), at::kLong);
    ASSERT_TRUE(d.mask_probs.defined());
    EXPECT_EQ(d.mask_probs.sizes(), (std::vector<int64_t>{0, 1, 28, 28}));
  }
}

// Targets select the losses, not the module's mode (as in the RPN): the same losses in eval
// mode, detections in training mode.
TEST(RoiHeadsTest, TargetsSelectLossesWhateverTheMode) {
  GoldenSetup s = LoadSetup(at::kCPU);
  s.heads->eval();
  const auto train = Golden("train", "both");
  const auto gt = Golden("targets", "batch");
  const std::vector<InstanceTargets> targets = {
      {gt.at("gt_boxes0"), gt.at("gt_labels0"), gt.at("gt_masks0")},
      {gt.at("gt_boxes1"), gt.at("gt_labels1"), gt.at("gt_masks1")}};
  const RoiHeadsOutput losses = s.heads->forward(
      s.features, {train.at("proposals0"), train.at("proposals1")}, s.image_sizes, &targets);
  EXPECT_TRUE(losses.detections.empty());
  ASSERT_EQ(losses.losses.size(), 3u);
  for (const char* name : {"loss_classifier", "loss_box_reg", "loss_mask"}) {
    const double expected = train.at(name).item<double>();
    EXPECT_NEAR(losses.losses.at(name).item<double>(), expected, 1e-4 * expected) << name;
  }

  s.heads->train();
  const auto eval = Golden("eval", "batch");
  torch::NoGradGuard no_grad;
  const RoiHeadsOutput detections = s.heads->forward(
      s.features, {eval.at("proposals0"), eval.at("proposals1")}, s.image_sizes, nullptr);
  EXPECT_TRUE(detections.losses.empty());
  ASSERT_EQ(detections.detections.size(), 2u);
  EXPECT_TRUE(at::equal(detections.detections[1].labels, eval.at("labels1")));
}

TEST(RoiHeadsTest, MismatchedInputsAreErrors) {
  GoldenSetup s = LoadSetup(at::kCPU);
  const std::vector<InstanceTargets> one(1);
  const std::vector<at::Tensor> two_images = {at::zeros({0, 4}), at::zeros({0, 4})};
  ops::ExpectError([&] { s.heads->forward(s.features, two_images, s.image_sizes, &one); },
                   "RoiHeads: 1 InstanceTargets for 2 images");
  ops::ExpectError(
      [&] {
        s.heads->forward(s.features, {at::zeros({0, 4})}, s.image_sizes, nullptr);
      },
      "RoiHeads: 1 proposal tensors for a batch of 2");
  const std::vector<InstanceTargets> no_masks = {
      {at::zeros({0, 4}), at::zeros({0}, at::kLong), {}},
      {at::zeros({0, 4}), at::zeros({0}, at::kLong), {}}};
  ops::ExpectError([&] { s.heads->forward(s.features, two_images, s.image_sizes, &no_masks); },
                   "RoiHeads: targets[0] needs masks [G, H, W] for the mask branch");
}

}  // namespace
}  // namespace vision::models::mask_rcnn
