#include "models/mask_rcnn/rpn.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include "gtest/gtest.h"
#include "models/ops/golden_for_test.h"

namespace vision::models::mask_rcnn {
namespace {

constexpr char kGolden[] = "models/mask_rcnn/testdata/rpn_golden.pth";
// Tolerances against torchvision: proposals in pixels, losses relative, gradients absolute.
constexpr double kProposalTolerance = 1e-4;
constexpr double kLossTolerance = 1e-5;
constexpr double kGradientTolerance = 1e-4;

using Case = std::map<std::string, at::Tensor>;

// The golden case's network (options and head weights) and inputs, on `device`.
struct Setup {
  RegionProposalNetwork rpn{nullptr};
  std::vector<at::Tensor> features;
  int64_t batch_height = 0;
  int64_t batch_width = 0;
  std::vector<std::pair<int64_t, int64_t>> image_sizes;
  std::vector<at::Tensor> gt_boxes;
};

// The head's parameters by torchvision's names (conv.0.0 is our conv).
std::map<std::string, at::Tensor> HeadParameters(RpnHead& head) {
  return {{"conv_weight", head->conv->weight},
          {"conv_bias", head->conv->bias},
          {"cls_logits_weight", head->cls_logits->weight},
          {"cls_logits_bias", head->cls_logits->bias},
          {"bbox_pred_weight", head->bbox_pred->weight},
          {"bbox_pred_bias", head->bbox_pred->bias}};
}

// In `dtype`: the golden float inputs and weights converted, as the golden script converts them.
Setup Build(const Case& t, const at::Device& device, at::ScalarType dtype,
            bool every_anchor_sampled) {
  Setup s;
  for (int l = 0; t.count("feature" + std::to_string(l)); ++l) {
    s.features.push_back(t.at("feature" + std::to_string(l)).to(device, dtype));
  }
  const at::Tensor top_n = t.at("top_n");
  const at::Tensor thresholds = t.at("thresholds");
  RpnOptions options;
  options.in_channels(s.features[0].size(1))
      .pre_nms_top_n_train(top_n[0].item<int64_t>())
      .pre_nms_top_n_test(top_n[1].item<int64_t>())
      .post_nms_top_n_train(top_n[2].item<int64_t>())
      .post_nms_top_n_test(top_n[3].item<int64_t>())
      .nms_threshold(thresholds[0].item<double>())
      .score_threshold(thresholds[1].item<double>())
      .fg_iou_threshold(thresholds[2].item<double>())
      .bg_iou_threshold(thresholds[3].item<double>());
  if (every_anchor_sampled) {
    options.batch_size_per_image(static_cast<int64_t>(t.at("sampling")[0].item<double>()))
        .positive_fraction(t.at("sampling")[1].item<double>());
  }
  s.rpn = RegionProposalNetwork(options);
  for (auto& [name, parameter] : HeadParameters(s.rpn->head)) {
    parameter.set_data(t.at(name).to(dtype));
  }
  s.rpn->to(device);
  s.batch_height = t.at("batch_hw")[0].item<int64_t>();
  s.batch_width = t.at("batch_hw")[1].item<int64_t>();
  const at::Tensor sizes = t.at("image_sizes");
  for (int64_t i = 0; i < sizes.size(0); ++i) {
    s.image_sizes.emplace_back(sizes[i][0].item<int64_t>(), sizes[i][1].item<int64_t>());
    s.gt_boxes.push_back(t.at("gt" + std::to_string(i)).to(device, dtype));
  }
  return s;
}

// `boxes` [K, 4] on the host with the rows of every run of equal `scores` (sorted, best first)
// in lexicographic order. torchvision's order of equal scores is arbitrary: on the CPU with more
// than 1,000 boxes its batched NMS sorts the kept boxes by score with an unstable sort.
at::Tensor OrderTies(const at::Tensor& boxes, const at::Tensor& scores) {
  const at::Tensor b = boxes.detach().cpu().to(at::kDouble).contiguous();
  const at::Tensor s = scores.cpu().to(at::kDouble).contiguous();
  std::vector<std::array<double, 4>> rows(b.size(0));
  std::memcpy(rows.data(), b.data_ptr<double>(), b.numel() * sizeof(double));
  const double* score = s.data_ptr<double>();
  for (int64_t begin = 0, end = 0; begin < s.numel(); begin = end) {
    for (end = begin + 1; end < s.numel() && score[end] == score[begin];) ++end;
    std::sort(rows.begin() + begin, rows.begin() + end);
  }
  return at::from_blob(rows.data(), b.sizes(), at::kDouble).clone();
}

// Same count and order (rows of equal scores in either order), coordinates within tolerance.
void ExpectProposals(const std::vector<at::Tensor>& actual, const Case& t,
                     const std::string& mode, at::ScalarType dtype) {
  const std::string prefix = mode + "_proposals";
  EXPECT_EQ(t.count(prefix + std::to_string(actual.size())), 0u) << "fewer images than expected";
  for (size_t i = 0; i < actual.size(); ++i) {
    SCOPED_TRACE(prefix + std::to_string(i));
    const at::Tensor& expected = t.at(prefix + std::to_string(i));
    const at::Tensor& scores = t.at(mode + "_scores" + std::to_string(i));
    EXPECT_FALSE(actual[i].requires_grad());
    EXPECT_EQ(actual[i].scalar_type(), dtype);
    ASSERT_EQ(actual[i].sizes(), expected.sizes());
    EXPECT_LE(ops::MaxDiff(OrderTies(actual[i], scores), OrderTies(expected, scores)),
              kProposalTolerance);
  }
}

void ExpectLoss(const at::Tensor& actual, const at::Tensor& expected) {
  ASSERT_TRUE(actual.defined());
  EXPECT_EQ(actual.dim(), 0);
  const double e = expected.item<double>();
  EXPECT_LE(std::abs(actual.item<double>() - e), kLossTolerance * std::abs(e))
      << actual.item<double>() << " vs " << e;
}

// Eval-mode proposals, train-mode proposals, losses with every labelled anchor sampled and the
// head's gradients (the golden keys with `prefix`), and on the CPU in float losses with
// torchvision's default sampling from the same seed.
void CheckCase(const Case& t, const at::Device& device, at::ScalarType dtype,
               const std::string& prefix) {
  Setup s = Build(t, device, dtype, /*every_anchor_sampled=*/true);
  s.rpn->eval();
  const RpnOutput eval =
      s.rpn->forward(s.features, s.batch_height, s.batch_width, s.image_sizes, nullptr);
  EXPECT_TRUE(eval.losses.empty());
  ExpectProposals(eval.proposals, t, prefix + "eval", dtype);

  s.rpn->train();
  const RpnOutput train =
      s.rpn->forward(s.features, s.batch_height, s.batch_width, s.image_sizes, &s.gt_boxes);
  ExpectProposals(train.proposals, t, prefix + "train", dtype);
  ASSERT_EQ(train.losses.size(), 2u);
  ExpectLoss(train.losses.at("loss_objectness"), t.at(prefix + "loss_objectness"));
  ExpectLoss(train.losses.at("loss_rpn_box_reg"), t.at(prefix + "loss_rpn_box_reg"));
  (train.losses.at("loss_objectness") + train.losses.at("loss_rpn_box_reg")).backward();
  for (auto& [name, parameter] : HeadParameters(s.rpn->head)) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(parameter.grad().defined());
    EXPECT_LE(ops::MaxDiff(parameter.grad(), t.at(prefix + "grad_" + name)), kGradientTolerance);
  }
  // torchvision's default sampling draws from the CPU generator (the golden's seed); on CUDA
  // torch.randperm draws from the device's generator, other numbers for the same seed.
  if (dtype != at::kFloat || !device.is_cpu()) return;

  Setup sampled = Build(t, device, dtype, /*every_anchor_sampled=*/false);
  sampled.rpn->train();
  at::manual_seed(t.at("sampled_seed").item<int64_t>());
  const RpnOutput losses = sampled.rpn->forward(sampled.features, sampled.batch_height,
                                                sampled.batch_width, sampled.image_sizes,
                                                &sampled.gt_boxes);
  ExpectLoss(losses.losses.at("loss_objectness"), t.at("sampled_loss_objectness"));
  ExpectLoss(losses.losses.at("loss_rpn_box_reg"), t.at("sampled_loss_rpn_box_reg"));
}

TEST(RegionProposalNetworkTest, MatchesTorchvision) {
  const auto cases = ops::LoadGoldenCases("rpn", kGolden);
  ASSERT_EQ(cases.size(), 2u);
  for (const auto& [name, t] : cases) {
    SCOPED_TRACE(name);
    CheckCase(t, at::kCPU, at::kFloat, "");
  }
}

// The model's parity test runs in double: anchors, proposals, losses and gradients follow.
TEST(RegionProposalNetworkTest, MatchesTorchvisionInDouble) {
  const Case t = ops::LoadGoldenCases("rpn", kGolden).at("multiple_of_32");
  CheckCase(t, at::kCPU, at::kDouble, "double_");
}

TEST(RegionProposalNetworkTest, CudaMatchesTorchvision) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible";
  for (const auto& [name, t] : ops::LoadGoldenCases("rpn", kGolden)) {
    SCOPED_TRACE(name);
    CheckCase(t, at::Device(at::kCUDA), at::kFloat, "");
  }
}

TEST(RpnHeadTest, ShapesNamesAndInitialisation) {
  RpnHead head(64, 3);
  std::vector<std::string> names;
  for (const auto& item : head->named_parameters()) names.push_back(item.key());
  EXPECT_EQ(names, (std::vector<std::string>{"conv.weight", "conv.bias", "cls_logits.weight",
                                             "cls_logits.bias", "bbox_pred.weight",
                                             "bbox_pred.bias"}));
  EXPECT_EQ(head->conv->weight.sizes(), (at::IntArrayRef{64, 64, 3, 3}));
  // 36,864 draws of N(0, 0.01): the sample deviation is within 2% of 0.01.
  EXPECT_NEAR(head->conv->weight.std().item<double>(), 0.01, 2e-4);
  EXPECT_NEAR(head->conv->weight.mean().item<double>(), 0.0, 2e-4);
  for (auto& [name, parameter] : HeadParameters(head)) {
    if (name.find("bias") != std::string::npos) {
      EXPECT_TRUE(at::equal(parameter, at::zeros_like(parameter))) << name;
    }
  }
  const auto [objectness, deltas] =
      head->forward({at::randn({2, 64, 5, 7}), at::randn({2, 64, 3, 4})});
  ASSERT_EQ(objectness.size(), 2u);
  EXPECT_EQ(objectness[0].sizes(), (at::IntArrayRef{2, 3, 5, 7}));
  EXPECT_EQ(deltas[1].sizes(), (at::IntArrayRef{2, 12, 3, 4}));
}

TEST(RegionProposalNetworkTest, NoGroundTruthAnywhereMeansAllNegativesAndNoBoxLoss) {
  // One level, one anchor per location, every anchor sampled: the objectness loss is the mean
  // of softplus(logit) over all anchors (target 0), the box loss exactly 0.
  RegionProposalNetwork rpn(RpnOptions()
                                .in_channels(4)
                                .anchors(AnchorGeneratorOptions().sizes({{8}}).aspect_ratios({{1}}))
                                .batch_size_per_image(1000));
  rpn->train();
  const std::vector<at::Tensor> features = {at::randn({2, 4, 4, 6})};
  const std::vector<at::Tensor> gt = {at::zeros({0, 4}), at::zeros({0, 4})};
  const RpnOutput out = rpn->forward(features, 16, 24, {{16, 24}, {10, 20}}, &gt);
  const at::Tensor logits = rpn->head->forward(features).first[0];
  EXPECT_NEAR(out.losses.at("loss_objectness").item<double>(),
              at::softplus(logits).mean().item<double>(), 1e-6);
  EXPECT_EQ(out.losses.at("loss_rpn_box_reg").item<double>(), 0.0);
  out.losses.at("loss_objectness").backward();
  EXPECT_TRUE(rpn->head->cls_logits->weight.grad().defined());
}

TEST(RegionProposalNetworkTest, RejectsInconsistentInputs) {
  RegionProposalNetwork rpn(RpnOptions().in_channels(4));
  std::vector<at::Tensor> features;
  for (int64_t l = 0; l < 5; ++l) features.push_back(at::randn({2, 4, 16 >> l, 16 >> l}));
  ops::ExpectError([&] { rpn->forward(features, 64, 64, {{64, 64}}, nullptr); },
                   "1 image sizes for a batch of 2");
  ops::ExpectError([&] { rpn->forward({features[0]}, 64, 64, {{64, 64}, {64, 64}}, nullptr); },
                   "1 feature maps for 5 anchor levels");
  ops::ExpectError(
      [] {
        RegionProposalNetwork(RpnOptions().anchors(
            AnchorGeneratorOptions().sizes({{32}, {64, 128}}).aspect_ratios({{1.0}})));
      },
      "the same number of anchors per location");
}

}  // namespace
}  // namespace vision::models::mask_rcnn
