#include "models/dbnet/db_loss.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>

#include "gtest/gtest.h"

namespace vision::models::dbnet {
namespace {

at::Tensor Map(std::vector<float> values) {
  return at::tensor(values, at::kFloat).reshape({1, 4, 4});
}

// A 4 x 4 case small enough to do by hand. Two text pixels (P = 0.8, 0.6), one pixel outside
// the training mask (P = 0.99, which must not count) and 13 negatives, of which OHEM keeps
// the 3 * 2 = 6 with the highest loss, i.e. the highest probabilities.
class DBLossHandCase : public ::testing::Test {
 protected:
  const at::Tensor gt = Map({1, 1, 0, 0,  //
                             0, 0, 0, 0,  //
                             0, 0, 0, 0,  //
                             0, 0, 0, 0});
  const at::Tensor mask = Map({1, 1, 1, 1,  //
                               1, 1, 1, 0,  //
                               1, 1, 1, 1,  //
                               1, 1, 1, 1});
  const at::Tensor probability = Map({0.8f, 0.6f, 0.9f, 0.7f,   //
                                      0.5f, 0.4f, 0.3f, 0.99f,  //
                                      0.2f, 0.1f, 0.1f, 0.1f,   //
                                      0.1f, 0.1f, 0.1f, 0.05f});
};

// Under autocast the BCE runs in float32 outside autocast (CUDA's autocast refuses it): the
// result is the float32 loss of the half-precision probabilities, and no error.
TEST_F(DBLossHandCase, BalancedBCEUnderAutocastIsTheFloatLossOfItsInputs) {
  const at::Tensor low = probability.to(at::kBFloat16);
  const double plain = BalancedBCELoss(low.to(at::kFloat), gt, mask, 3.0f, 1e-6f).item<double>();
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCPU, true);
  const at::Tensor autocast = BalancedBCELoss(low, gt, mask, 3.0f, 1e-6f);
  at::autocast::set_autocast_enabled(at::kCPU, false);
  EXPECT_EQ(autocast.scalar_type(), at::kFloat);
  EXPECT_EQ(autocast.item<double>(), plain);
}

TEST_F(DBLossHandCase, BalancedBCEWithHardNegativeMining) {
  // Hardest 6 of the 13 negatives: 0.9, 0.7, 0.5, 0.4, 0.3, 0.2.
  const double expected = (-std::log(0.8) - std::log(0.6) - std::log(0.1) - std::log(0.3) -
                           std::log(0.5) - std::log(0.6) - std::log(0.7) - std::log(0.8)) /
                          (2 + 6 + 1e-6);
  EXPECT_NEAR(BalancedBCELoss(probability, gt, mask, 3.0f, 1e-6f).item<double>(), expected, 1e-5);
  // Ratio 1: the 2 hardest negatives only.
  const double ratio_one =
      (-std::log(0.8) - std::log(0.6) - std::log(0.1) - std::log(0.3)) / (2 + 2 + 1e-6);
  EXPECT_NEAR(BalancedBCELoss(probability, gt, mask, 1.0f, 1e-6f).item<double>(), ratio_one, 1e-5);
  // Ratio 10: all 13 negatives (there are no more).
  double all = -std::log(0.8) - std::log(0.6);
  for (float p : {0.9f, 0.7f, 0.5f, 0.4f, 0.3f, 0.2f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.05f}) {
    all -= std::log(1.0 - p);
  }
  EXPECT_NEAR(BalancedBCELoss(probability, gt, mask, 10.0f, 1e-6f).item<double>(),
              all / (2 + 13 + 1e-6), 1e-5);
}

TEST_F(DBLossHandCase, SortedMiningKeepsTheSameNegatives) {
  const double expected = (-std::log(0.8) - std::log(0.6) - std::log(0.1) - std::log(0.3) -
                           std::log(0.5) - std::log(0.6) - std::log(0.7) - std::log(0.8)) /
                          (2 + 6 + 1e-6);
  EXPECT_NEAR(BalancedBCELoss(probability, gt, mask, 3.0f, 1e-6f, HardNegativeMining::kSorted)
                  .item<double>(),
              expected, 1e-5);
  EXPECT_EQ(BalancedBCELoss(probability, at::zeros_like(gt), mask, 3.0f, 1e-6f,
                            HardNegativeMining::kSorted)
                .item<float>(),
            0.0f);
}

// Sorting every negative and summing the ones ranked below the count (no host read) against
// topk of the count read on the host: the same loss and gradients up to float summation order,
// for ratios that cut the negatives, keep them all, and for maps without text or mask.
TEST(BalancedBCELoss, SortedMiningEqualsTopK) {
  at::manual_seed(7);
  const at::Tensor probability = at::rand({2, 24, 20}, at::kFloat) * 0.98 + 0.01;
  const at::Tensor text = (at::rand({2, 24, 20}) < 0.1).to(at::kFloat);
  const at::Tensor in_mask = (at::rand({2, 24, 20}) < 0.9).to(at::kFloat);
  struct Case {
    const char* name;
    at::Tensor gt, mask;
    float ratio;
  };
  const std::vector<Case> cases = {
      {"ratio 3", text, in_mask, 3.0f},
      {"ratio 0.5", text, in_mask, 0.5f},
      {"ratio 2.7 (count truncated)", text, in_mask, 2.7f},
      {"ratio 100 (every negative)", text, in_mask, 100.0f},
      {"no text", at::zeros_like(text), in_mask, 3.0f},
      {"empty mask", text, at::zeros_like(in_mask), 3.0f},
  };
  for (const Case& c : cases) {
    at::Tensor grads[2];
    double values[2];
    int i = 0;
    for (HardNegativeMining mining : {HardNegativeMining::kTopK, HardNegativeMining::kSorted}) {
      const at::Tensor p = probability.clone().set_requires_grad(true);
      const at::Tensor loss = BalancedBCELoss(p, c.gt, c.mask, c.ratio, 1e-6f, mining);
      EXPECT_EQ(loss.scalar_type(), at::kFloat) << c.name;
      EXPECT_EQ(loss.dim(), 0) << c.name;
      loss.backward();
      values[i] = loss.item<double>();
      grads[i++] = p.grad();
    }
    EXPECT_NEAR(values[1], values[0], 1e-6 * std::abs(values[0]))
        << c.name << ": sorted " << values[1] << ", topk " << values[0];
    const double scale = std::max(grads[0].abs().max().item<double>(), 1e-30);
    EXPECT_LE((grads[1] - grads[0]).abs().max().item<double>(), 1e-6 * scale)
        << c.name << ": largest gradient " << scale;
    // The same pixels get a gradient (no tie decides here: the probabilities are distinct).
    EXPECT_TRUE(at::equal(grads[0] != 0, grads[1] != 0)) << c.name;
  }
}

TEST_F(DBLossHandCase, NoTextMeansNoProbabilityLoss) {
  // No positives: no negatives are mined either, as in the references.
  EXPECT_EQ(BalancedBCELoss(probability, at::zeros_like(gt), mask, 3.0f, 1e-6f).item<float>(),
            0.0f);
}

TEST_F(DBLossHandCase, MaskedL1) {
  const at::Tensor threshold = Map({0.3f, 0.5f, 0.7f, 0.3f,  //
                                    0.3f, 0.3f, 0.3f, 0.3f,  //
                                    0.3f, 0.3f, 0.3f, 0.3f,  //
                                    0.3f, 0.3f, 0.3f, 0.9f});
  const at::Tensor target = Map({0.7f, 0.7f, 0.7f, 0.3f,  //
                                 0.3f, 0.3f, 0.3f, 0.3f,  //
                                 0.3f, 0.3f, 0.3f, 0.3f,  //
                                 0.3f, 0.3f, 0.3f, 0.3f});
  const at::Tensor thresh_mask = Map({1, 1, 1, 0,  //
                                      0, 0, 0, 0,  //
                                      0, 0, 0, 0,  //
                                      0, 0, 0, 0});
  // |0.3 - 0.7| + |0.5 - 0.7| + 0 over 3 pixels; the 0.9 outside the mask does not count.
  EXPECT_NEAR(MaskedL1Loss(threshold, target, thresh_mask).item<double>(), 0.6 / 3, 1e-6);
  EXPECT_EQ(MaskedL1Loss(threshold, target, at::zeros_like(thresh_mask)).item<float>(), 0.0f);
  // An empty mask: 0 with zero (not NaN) gradients, computed without reading the mask's sum.
  const at::Tensor t = threshold.clone().set_requires_grad(true);
  MaskedL1Loss(t, target, at::zeros_like(thresh_mask)).backward();
  EXPECT_EQ(t.grad().abs().max().item<float>(), 0.0f);
}

TEST_F(DBLossHandCase, DiceOverTheTrainingMask) {
  // Binary map = probability here: intersection 0.8 + 0.6 = 1.4; sum of B over the mask is
  // the sum of all entries but the masked 0.99; sum of gt = 2.
  double sum_b = 0;
  for (float p : {0.8f, 0.6f, 0.9f, 0.7f, 0.5f, 0.4f, 0.3f, 0.2f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f,
                  0.1f, 0.05f}) {
    sum_b += p;
  }
  const double expected = 1.0 - 2.0 * 1.4 / (sum_b + 2.0 + 1e-6);
  EXPECT_NEAR(DiceLoss(probability, gt, mask, 1e-6f).item<double>(), expected, 1e-5);
  // Perfect prediction: 0.
  EXPECT_NEAR(DiceLoss(gt, gt, mask, 1e-6f).item<double>(), 0.0, 1e-6);
}

TEST_F(DBLossHandCase, DBLossAppliesAlphaAndBeta) {
  const at::Tensor threshold = at::full({1, 4, 4}, 0.5f);
  const at::Tensor thresh_map = at::full({1, 4, 4}, 0.3f);
  DBTargets targets{gt, mask, thresh_map, at::ones({1, 4, 4})};
  DBLossOptions options;
  options.alpha = 2.0f;
  options.beta = 10.0f;
  const std::map<std::string, at::Tensor> losses =
      DBLoss(probability, threshold, probability, targets, options);
  ASSERT_EQ(losses.size(), 3u);
  EXPECT_NEAR(losses.at("loss_prob").item<double>(),
              BalancedBCELoss(probability, gt, mask, 3.0f, 1e-6f).item<double>(), 1e-7);
  EXPECT_NEAR(losses.at("loss_binary").item<double>(),
              2.0 * DiceLoss(probability, gt, mask, 1e-6f).item<double>(), 1e-6);
  EXPECT_NEAR(losses.at("loss_thresh").item<double>(), 10.0 * 0.2, 1e-5);
}

TEST_F(DBLossHandCase, GradientsFlowOnlyThroughCountedPixels) {
  const at::Tensor p = probability.clone().set_requires_grad(true);
  BalancedBCELoss(p, gt, mask, 3.0f, 1e-6f).backward();
  const at::Tensor grad = p.grad().reshape({16});
  EXPECT_EQ(grad[7].item<float>(), 0.0f);   // outside the mask
  EXPECT_EQ(grad[15].item<float>(), 0.0f);  // an easy negative, not mined
  EXPECT_LT(grad[0].item<float>(), 0.0f);   // a positive: raise P
  EXPECT_GT(grad[2].item<float>(), 0.0f);   // the hardest negative: lower P
}

}  // namespace
}  // namespace vision::models::dbnet
