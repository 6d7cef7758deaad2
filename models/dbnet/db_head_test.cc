#include "models/dbnet/db_head.h"

#include <algorithm>
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
  necks::Fpn neck = MakeDBNeck(kBackboneChannels, kInner);
  DBHead head{DBHeadOptions(kInner).k(50)};
  neck->train();
  head->train();
  const at::Tensor fused = FuseLevels(neck->forward(Features(2, height, width)));
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
  necks::Fpn neck = MakeDBNeck(kBackboneChannels, kInner);
  DBHead head{DBHeadOptions(kInner)};
  neck->eval();
  head->eval();
  torch::NoGradGuard no_grad;
  const DBHeadOutput out = head->forward(FuseLevels(neck->forward(Features(1, height, width))));
  EXPECT_EQ(out.probability.sizes(), (std::vector<int64_t>{1, 1, height, width}));
  EXPECT_FALSE(out.threshold.defined());
  EXPECT_FALSE(out.binary.defined());
  // Asked for explicitly (validation losses), eval mode gives them too.
  const DBHeadOutput with =
      head->forward(FuseLevels(neck->forward(Features(1, height, width))), true);
  EXPECT_EQ(with.threshold.sizes(), (std::vector<int64_t>{1, 1, height, width}));
}

INSTANTIATE_TEST_SUITE_P(Sizes, DBHeadShapeTest,
                         ::testing::Values(Size{64, 64}, Size{96, 64}, Size{128, 96}));

TEST(DBNeckTest, SizesThatDoNotDivideBy32StillFuse) {
  // 100 x 72: levels 25 x 18, 13 x 9, 7 x 5, 4 x 3; each upsampling goes to the finer size.
  necks::Fpn neck = MakeDBNeck(kBackboneChannels, kInner);
  torch::NoGradGuard no_grad;
  EXPECT_EQ(FuseLevels(neck->forward(Features(1, 100, 72))).sizes(),
            (std::vector<int64_t>{1, kInner, 25, 18}));
}

TEST(DBNeckTest, FusionConcatenatesUpsampledLevelsCoarseFirst) {
  // Constant levels 0, 1, 2, 3 (fine to coarse) at 4 x 2, 2 x 1, 1 x 1, 1 x 1: nearest
  // upsampling keeps each constant, so the channels read 3, 2, 1, 0 everywhere.
  std::vector<at::Tensor> levels;
  for (int64_t level = 0; level < 4; ++level) {
    const int64_t height = std::max<int64_t>(1, 4 >> level);
    const int64_t width = std::max<int64_t>(1, 2 >> level);
    levels.push_back(at::full({1, 1, height, width}, static_cast<float>(level)));
  }
  const at::Tensor fused = FuseLevels(levels);
  ASSERT_EQ(fused.sizes(), (std::vector<int64_t>{1, 4, 4, 2}));
  for (int64_t c = 0; c < 4; ++c) {
    EXPECT_TRUE(at::all(fused[0][c] == static_cast<float>(3 - c)).item<bool>()) << c;
  }
}

TEST(DBNeckTest, ParameterNamesAreTheCheckpoints) {
  // DBNet checkpoints hold the neck as neck.<these names>: renaming them orphans every one.
  necks::Fpn neck = MakeDBNeck(kBackboneChannels, kInner);
  std::vector<std::string> names;
  for (const auto& item : neck->named_parameters()) names.push_back(item.key());
  EXPECT_EQ(names, (std::vector<std::string>{"lateral0.weight", "smooth0.weight",
                                             "lateral1.weight", "smooth1.weight",
                                             "lateral2.weight", "smooth2.weight",
                                             "lateral3.weight", "smooth3.weight"}));
}

TEST(DBNeckTest, ParameterCountMatchesThePaperLayout) {
  // Laterals 1x1 without bias: sum(c_i) * inner; smoothing 3x3 without bias: 4 * inner *
  // inner/4 * 9.
  necks::Fpn neck = MakeDBNeck(kBackboneChannels, kInner);
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
