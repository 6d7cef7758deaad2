#include "models/mask_rcnn/sampler.h"

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "gtest/gtest.h"
#include "models/ops/golden_for_test.h"

namespace vision::models::mask_rcnn {
namespace {

at::Tensor Labels(const std::vector<int64_t>& values) { return at::tensor(values, at::kLong); }

// Checks one image's masks: boolean, the given numbers chosen, positives only among labels >= 1,
// negatives only among labels == 0 (so ignored labels are never chosen).
void ExpectSample(const std::pair<at::Tensor, at::Tensor>& sample, const at::Tensor& labels,
                  int64_t num_pos, int64_t num_neg) {
  const auto& [pos, neg] = sample;
  ASSERT_EQ(pos.scalar_type(), at::kBool);
  ASSERT_EQ(neg.scalar_type(), at::kBool);
  ASSERT_EQ(pos.sizes(), labels.sizes());
  ASSERT_EQ(neg.sizes(), labels.sizes());
  EXPECT_EQ(pos.sum().item<int64_t>(), num_pos);
  EXPECT_EQ(neg.sum().item<int64_t>(), num_neg);
  EXPECT_TRUE((labels.masked_select(pos) >= 1).all().item<bool>());
  EXPECT_TRUE((labels.masked_select(neg) == 0).all().item<bool>());
}

TEST(BalancedSamplerTest, MorePositivesThanTheQuota) {
  // Quota 2 of 4: 2 of the 3 positives (labels 1 and 2 both count), 2 of the 3 negatives.
  const at::Tensor labels = Labels({-1, 1, 0, 2, 0, -1, 1, 0});
  for (uint64_t seed = 0; seed < 20; ++seed) {
    at::manual_seed(seed);
    const auto sampled = BalancedSampler(4, 0.5).Sample({labels});
    ASSERT_EQ(sampled.size(), 1u);
    ExpectSample(sampled[0], labels, 2, 2);
  }
}

TEST(BalancedSamplerTest, FewerPositivesThanTheQuotaLeaveTheRestToNegatives) {
  const at::Tensor labels = Labels({0, 0, 1, 0, 0, 0, -1, 0, 0, 0, 0, 0});
  at::manual_seed(3);
  ExpectSample(BalancedSampler(6, 0.5).Sample({labels})[0], labels, 1, 5);
}

TEST(BalancedSamplerTest, NoPositives) {
  const at::Tensor labels = Labels({0, -1, 0, 0, -1});
  const auto sampled = BalancedSampler(2, 0.5).Sample({labels});
  ExpectSample(sampled[0], labels, 0, 2);
  // Fewer negatives than the batch: all of them.
  ExpectSample(BalancedSampler(10, 0.5).Sample({labels})[0], labels, 0, 3);
}

TEST(BalancedSamplerTest, PositiveQuotaIsTruncatedAsPythonsInt) {
  at::Tensor labels = at::zeros({200}, at::kLong);
  labels.slice(0, 0, 60).fill_(1);
  labels.slice(0, 60, 70).fill_(-1);
  // int(10 * 0.25) = 2; int(3 * 0.7) = 2; int(100 * 0.29) = 28 (100 * 0.29 is 28.999999999999996
  // in double).
  ExpectSample(BalancedSampler(10, 0.25).Sample({labels})[0], labels, 2, 8);
  ExpectSample(BalancedSampler(3, 0.7).Sample({labels})[0], labels, 2, 1);
  ExpectSample(BalancedSampler(100, 0.29).Sample({labels})[0], labels, 28, 72);
  ExpectSample(BalancedSampler(100, 0.0).Sample({labels})[0], labels, 0, 100);
  ExpectSample(BalancedSampler(50, 1.0).Sample({labels})[0], labels, 50, 0);
}

TEST(BalancedSamplerTest, EveryCandidateIsTakenWhenAllFitWhateverTheSeed) {
  const at::Tensor a = Labels({1, 0, -1, 0, 3, -1, 0});
  const at::Tensor b = Labels({-1, -1, 0});
  for (uint64_t seed : {1u, 2u, 99u}) {
    at::manual_seed(seed);
    const auto sampled = BalancedSampler(512, 0.25).Sample({a, b});
    ASSERT_EQ(sampled.size(), 2u);
    EXPECT_TRUE(at::equal(sampled[0].first, a >= 1));
    EXPECT_TRUE(at::equal(sampled[0].second, a == 0));
    EXPECT_TRUE(at::equal(sampled[1].first, b >= 1));
    EXPECT_TRUE(at::equal(sampled[1].second, b == 0));
  }
}

TEST(BalancedSamplerTest, FloatLabelsAsTorchvisionsRpnPassesThem) {
  const at::Tensor labels = at::tensor({1.0f, -1.0f, 0.0f, 0.0f}, at::kFloat);
  const auto sampled = BalancedSampler(8, 0.5).Sample({labels});
  EXPECT_TRUE(at::equal(sampled[0].first, labels >= 1));
  EXPECT_TRUE(at::equal(sampled[0].second, labels == 0));
}

TEST(BalancedSamplerTest, SameDrawsAsTorchvisionFromTheSameSeed) {
  // sampler.<case>: seed, batch_size_per_image, positive_fraction (double), labels<i>,
  // pos<i>/neg<i> (torchvision's masks after torch.manual_seed(seed)).
  for (const auto& [name, t] :
       ops::LoadGoldenCases("sampler", "models/mask_rcnn/testdata/rpn_golden.pth")) {
    SCOPED_TRACE(name);
    std::vector<at::Tensor> labels;
    for (int i = 0; t.count("labels" + std::to_string(i)); ++i) {
      labels.push_back(t.at("labels" + std::to_string(i)));
    }
    at::manual_seed(t.at("seed").item<int64_t>());
    const auto sampled = BalancedSampler(t.at("batch_size_per_image").item<int64_t>(),
                                         t.at("positive_fraction").item<double>())
                             .Sample(labels);
    ASSERT_EQ(sampled.size(), labels.size());
    for (size_t i = 0; i < labels.size(); ++i) {
      EXPECT_TRUE(at::equal(sampled[i].first, t.at("pos" + std::to_string(i)).to(at::kBool)));
      EXPECT_TRUE(at::equal(sampled[i].second, t.at("neg" + std::to_string(i)).to(at::kBool)));
    }
  }
}

TEST(BalancedSamplerTest, RejectsBadOptionsAndLabels) {
  ops::ExpectError([] { BalancedSampler(-1, 0.5); }, "batch_size_per_image must be >= 0");
  ops::ExpectError([] { BalancedSampler(4, 1.5); }, "positive_fraction must be in [0, 1]");
  ops::ExpectError([] { BalancedSampler(4, 0.5).Sample({at::zeros({2, 2}, at::kLong)}); },
                   "labels must be [P]");
}

}  // namespace
}  // namespace vision::models::mask_rcnn
