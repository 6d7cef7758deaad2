#include "models/dbnet/db_head.h"

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/utils.h>

#include "gtest/gtest.h"

namespace vision::models::dbnet {
namespace {

constexpr int64_t kInner = 16;
const std::vector<int64_t> kBackboneChannels = {4, 6, 8, 10};

// Backbone-like features at strides 4, 8, 16, 32 (rounded up, as strided convs do).
std::vector<at::Tensor> Features(int64_t batch, int64_t height, int64_t width) {
  std::vector<at::Tensor> features;
  for (int level = 0; level < 4; ++level) {
    const int64_t stride = int64_t{4} << level;
    features.push_back(at::randn({batch, kBackboneChannels[level], (height + stride - 1) / stride,
                                  (width + stride - 1) / stride}));
  }
  return features;
}

struct Size {
  int64_t height;
  int64_t width;
};

class DBHeadShapeTest : public ::testing::TestWithParam<Size> {};

TEST_P(DBHeadShapeTest, TrainModeGivesAllThreeMapsAtInputResolution) {
  const auto [height, width] = GetParam();
  at::manual_seed(0);
  DBNeck neck{DBNeckOptions(kBackboneChannels, kInner)};
  DBHead head{DBHeadOptions(kInner).k(50)};
  neck->train();
  head->train();
  const at::Tensor fused = neck->forward(Features(2, height, width));
  EXPECT_EQ(fused.sizes(), (std::vector<int64_t>{2, kInner, height / 4, width / 4}));
  const DBHeadOutput out = head->forward(fused);
  const std::vector<int64_t> expected = {2, 1, height, width};
  EXPECT_EQ(out.probability.sizes(), expected);
  ASSERT_TRUE(out.threshold.defined());
  ASSERT_TRUE(out.binary.defined());
  EXPECT_EQ(out.threshold.sizes(), expected);
  EXPECT_EQ(out.binary.sizes(), expected);
  // Maps are sigmoid outputs, and B = 1 / (1 + exp(-k (P - T))).
  EXPECT_GE(out.probability.min().item<float>(), 0.0f);
  EXPECT_LE(out.probability.max().item<float>(), 1.0f);
  EXPECT_TRUE(at::allclose(
      out.binary, 1.0 / (1.0 + at::exp(-50.0 * (out.probability - out.threshold))), 1e-5, 1e-6));
}

TEST_P(DBHeadShapeTest, EvalModeGivesOnlyTheProbabilityMap) {
  const auto [height, width] = GetParam();
  DBNeck neck{DBNeckOptions(kBackboneChannels, kInner)};
  DBHead head{DBHeadOptions(kInner)};
  neck->eval();
  head->eval();
  torch::NoGradGuard no_grad;
  const DBHeadOutput out = head->forward(neck->forward(Features(1, height, width)));
  EXPECT_EQ(out.probability.sizes(), (std::vector<int64_t>{1, 1, height, width}));
  EXPECT_FALSE(out.threshold.defined());
  EXPECT_FALSE(out.binary.defined());
  // Asked for explicitly (validation losses), eval mode gives them too.
  const DBHeadOutput with = head->forward(neck->forward(Features(1, height, width)), true);
  EXPECT_EQ(with.threshold.sizes(), (std::vector<int64_t>{1, 1, height, width}));
}

INSTANTIATE_TEST_SUITE_P(Sizes, DBHeadShapeTest,
                         ::testing::Values(Size{64, 64}, Size{96, 64}, Size{128, 96}));

TEST(DBNeckTest, SizesThatDoNotDivideBy32StillFuse) {
  // 100 x 72: levels 25 x 18, 13 x 9, 7 x 5, 4 x 3; each upsampling goes to the finer size.
  DBNeck neck{DBNeckOptions(kBackboneChannels, kInner)};
  torch::NoGradGuard no_grad;
  EXPECT_EQ(neck->forward(Features(1, 100, 72)).sizes(), (std::vector<int64_t>{1, kInner, 25, 18}));
}

TEST(DBNeckTest, ParameterCountMatchesThePaperLayout) {
  // Laterals 1x1 without bias: sum(c_i) * inner; smoothing 3x3 without bias: 4 * inner *
  // inner/4 * 9.
  DBNeck neck{DBNeckOptions(kBackboneChannels, kInner)};
  int64_t count = 0;
  for (const at::Tensor& p : neck->parameters()) count += p.numel();
  EXPECT_EQ(count, (4 + 6 + 8 + 10) * kInner + 4 * kInner * (kInner / 4) * 9);
  // Each head branch: 3x3 conv (no bias), BN, 2x2 deconv (bias), BN, 2x2 deconv to 1 (bias).
  DBHead head{DBHeadOptions(kInner)};
  count = 0;
  for (const at::Tensor& p : head->parameters()) count += p.numel();
  const int64_t h = kInner / 4;
  EXPECT_EQ(count, 2 * (kInner * h * 9 + 2 * h + h * h * 4 + h + 2 * h + h * 4 + 1));
}

TEST(DBHeadTest, BatchNormInitialisationFollowsTheReference) {
  // MhLiao/DB's weights_init: BatchNorm weight 1, bias 1e-4 (entries 1 and 4 of a branch).
  DBHead head{DBHeadOptions(kInner)};
  const auto parameters = head->named_parameters();
  for (const char* branch : {"probability", "threshold"}) {
    for (const char* bn : {".1.", ".4."}) {
      const std::string prefix = std::string(branch) + bn;
      EXPECT_TRUE(at::all(parameters[prefix + "weight"] == 1.0f).item<bool>()) << prefix;
      EXPECT_TRUE(at::all(parameters[prefix + "bias"] == 1e-4f).item<bool>()) << prefix;
    }
  }
}

}  // namespace
}  // namespace vision::models::dbnet
