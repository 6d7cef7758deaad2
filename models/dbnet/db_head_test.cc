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

// The two DBHeadImplementations on the same weights: identical maps, gradients and BatchNorm
// running statistics up to the order of the sums. In double precision, so that "up to the
// order" means 1e-12 where float32 rounding would need 1e-5: the bias of each branch's first
// transposed convolution (followed by BatchNorm, so its exact gradient is zero) then differs
// by rounding noise of the other gradients' size times 1e-16, not by 1e-3 of them.
struct HeadPair {
  DBHead modules{DBHeadOptions(kInner).implementation(DBHeadImplementation::kModules)};
  DBHead phases{DBHeadOptions(kInner).implementation(DBHeadImplementation::kPhaseMatmul)};

  explicit HeadPair(at::ScalarType dtype) {
    modules->to(dtype);
    phases->to(dtype);
    torch::NoGradGuard no_grad;
    const auto source = modules->named_parameters();
    for (auto& item : phases->named_parameters()) item.value().copy_(source[item.key()]);
  }
};

double MaxAbs(const at::Tensor& t) { return t.abs().max().item<double>(); }

void ExpectSameHeadOutputs(const DBHeadOutput& a, const DBHeadOutput& b, double tolerance) {
  EXPECT_LE(MaxAbs(a.probability - b.probability), tolerance);
  ASSERT_EQ(a.threshold.defined(), b.threshold.defined());
  if (a.threshold.defined()) {
    EXPECT_LE(MaxAbs(a.threshold - b.threshold), tolerance);
    EXPECT_LE(MaxAbs(a.binary - b.binary), tolerance);
  }
}

// Trains both heads one forward/backward on `fused` (odd sizes, so no dimension hides a
// transposition) and compares outputs, every gradient and the running statistics.
void ExpectImplementationsAgree(const at::Tensor& fused, double output_tolerance,
                                double gradient_tolerance) {
  HeadPair heads(fused.scalar_type());
  at::Tensor weights =
      at::randn({fused.size(0), 3, 4 * fused.size(2), 4 * fused.size(3)}, fused.options());
  std::vector<DBHeadOutput> outputs;
  for (DBHead* head : {&heads.modules, &heads.phases}) {
    (*head)->train();
    outputs.push_back((*head)->forward(fused));
    const DBHeadOutput& out = outputs.back();
    const at::Tensor maps = at::cat({out.probability, out.threshold, out.binary}, 1);
    (maps * weights).sum().backward();
  }
  ExpectSameHeadOutputs(outputs[0], outputs[1], output_tolerance);
  double largest = 0;
  for (const at::Tensor& p : heads.modules->parameters())
    largest = std::max(largest, MaxAbs(p.grad()));
  ASSERT_GT(largest, 0);
  const auto grads = heads.phases->named_parameters();
  for (const auto& item : heads.modules->named_parameters()) {
    EXPECT_LE(MaxAbs(item.value().grad() - grads[item.key()].grad()), gradient_tolerance * largest)
        << item.key() << ": the largest gradient entry is " << largest;
  }
  const auto buffers = heads.phases->named_buffers();
  for (const auto& item : heads.modules->named_buffers()) {
    EXPECT_LE(MaxAbs(item.value().to(at::kDouble) - buffers[item.key()].to(at::kDouble)),
              output_tolerance)
        << item.key();
  }
  // Eval mode, with the running statistics both have now.
  heads.modules->eval();
  heads.phases->eval();
  torch::NoGradGuard no_grad;
  ExpectSameHeadOutputs(heads.modules->forward(fused), heads.phases->forward(fused),
                        output_tolerance);
}

TEST(DBHeadImplementationTest, PhaseMatmulEqualsTheModulesInDoublePrecision) {
  at::manual_seed(3);
  ExpectImplementationsAgree(at::randn({2, kInner, 7, 5}, at::kDouble), 1e-12, 1e-12);
}

TEST(DBHeadImplementationTest, PhaseMatmulEqualsTheModulesInFloat) {
  // float32: the same comparison within float rounding of sums over 16 channels (x 9 taps).
  at::manual_seed(4);
  ExpectImplementationsAgree(at::randn({2, kInner, 6, 9}), 1e-5, 1e-5);
}

TEST(DBHeadImplementationTest, PhaseMatmulTakesAChannelsLastFeature) {
  // TrainPipelineConfig.memory_format CHANNELS_LAST hands the head an NHWC feature.
  at::manual_seed(5);
  ExpectImplementationsAgree(
      at::randn({3, kInner, 5, 6}, at::kDouble).contiguous(at::MemoryFormat::ChannelsLast), 1e-12,
      1e-12);
}

}  // namespace
}  // namespace vision::models::dbnet
