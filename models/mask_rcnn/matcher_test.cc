#include "models/mask_rcnn/matcher.h"

#include <vector>

#include <ATen/ATen.h>

#include "gtest/gtest.h"
#include "models/ops/golden_for_test.h"

namespace vision::models::mask_rcnn {
namespace {

at::Tensor Quality(const std::vector<float>& values, int64_t num_gt) {
  return at::tensor(values, at::kFloat).view({num_gt, -1});
}

void ExpectMatches(const at::Tensor& matches, const std::vector<int64_t>& expected) {
  EXPECT_EQ(matches.scalar_type(), at::kLong);
  EXPECT_TRUE(at::equal(matches, at::tensor(expected, at::kLong))) << matches;
}

TEST(MatcherTest, ThresholdsAndTheBetweenBand) {
  // Each prediction's best ground truth: 0.9 (gt 0, matched), 0.6 (between), 0.1 (below),
  // exactly 0.7 (matched: >= high), exactly 0.3 (between: >= low).
  const at::Tensor quality = Quality({0.9f, 0.5f, 0.1f, 0.7f, 0.3f,  //
                                      0.2f, 0.6f, 0.0f, 0.65f, 0.29f},
                                     2);
  ExpectMatches(Matcher(0.7, 0.3, false).Match(quality),
                {0, Matcher::kBetweenThresholds, Matcher::kBelowLowThreshold, 0,
                 Matcher::kBetweenThresholds});
}

TEST(MatcherTest, EqualThresholdsHaveNoBetweenBand) {
  const at::Tensor quality = Quality({0.49f, 0.5f, 0.51f}, 1);
  ExpectMatches(Matcher(0.5, 0.5, false).Match(quality), {Matcher::kBelowLowThreshold, 0, 0});
}

TEST(MatcherTest, BestGroundTruthTiesGoToTheLowestIndex) {
  const at::Tensor quality = Quality({0.8f, 0.2f,  //
                                      0.8f, 0.9f},
                                     2);
  ExpectMatches(Matcher(0.7, 0.3, false).Match(quality), {0, 1});
}

TEST(MatcherTest, LowQualityMatchesRestoreEveryTiedPredictionsOwnBestMatch) {
  const at::Tensor quality = Quality({0.5f, 0.5f, 0.2f, 0.1f, 0.1f,    // gt 0: best 0.5, preds 0, 1
                                      0.6f, 0.1f, 0.4f, 0.4f, 0.2f,    // gt 1: best 0.6, pred 0
                                      0.0f, 0.0f, 0.0f, 0.25f, 0.05f},  // gt 2: best 0.25, pred 3
                                     3);
  // Without low-quality matches nothing reaches 0.7; pred 4 (best 0.2) is below 0.3.
  ExpectMatches(Matcher(0.7, 0.3, false).Match(quality),
                {Matcher::kBetweenThresholds, Matcher::kBetweenThresholds,
                 Matcher::kBetweenThresholds, Matcher::kBetweenThresholds,
                 Matcher::kBelowLowThreshold});
  // With them: pred 0 ties for gt 0's best and is gt 1's best; it gets back its own best match,
  // gt 1. Pred 1 (tied for gt 0's best) gets gt 0. Pred 3 is gt 2's best but overlaps gt 1 more:
  // it gets gt 1. Pred 2 is nobody's best and stays between the thresholds.
  ExpectMatches(Matcher(0.7, 0.3, true).Match(quality),
                {1, 0, Matcher::kBetweenThresholds, 1, Matcher::kBelowLowThreshold});
}

TEST(MatcherTest, GroundTruthOverlappingNothingRestoresEveryPrediction) {
  // torchvision's rule as it is: gt 1's highest quality is 0, which every prediction reaches, so
  // every prediction gets its pre-threshold match (gt 0, the first of the tied zeros for pred 2).
  const at::Tensor quality = Quality({0.9f, 0.1f, 0.0f,  //
                                      0.0f, 0.0f, 0.0f},
                                     2);
  ExpectMatches(Matcher(0.7, 0.3, true).Match(quality), {0, 0, 0});
  ExpectMatches(Matcher(0.7, 0.3, false).Match(quality),
                {0, Matcher::kBelowLowThreshold, Matcher::kBelowLowThreshold});
}

TEST(MatcherTest, DoubleQualityAndNonContiguousInput) {
  const at::Tensor quality = Quality({0.9f, 0.2f, 0.1f, 0.75f}, 2).t().contiguous().t();
  ExpectMatches(Matcher(0.7, 0.3, false).Match(quality.to(at::kDouble)), {0, 1});
  ExpectMatches(Matcher(0.7, 0.3, false).Match(quality), {0, 1});
}

TEST(MatcherTest, RejectsBadInput) {
  ops::ExpectError([] { Matcher(0.3, 0.7, false); }, "low_threshold (0.7) must be <= high");
  const Matcher matcher(0.7, 0.3, true);
  ops::ExpectError([&] { matcher.Match(at::zeros({0, 5})); }, "no ground-truth boxes");
  ops::ExpectError([&] { matcher.Match(at::zeros({2, 0})); }, "no predictions");
  ops::ExpectError([&] { matcher.Match(at::zeros({5})); }, "must be [G, P]");
}

}  // namespace
}  // namespace vision::models::mask_rcnn
