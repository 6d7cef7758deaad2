#include "models/necks/fpn.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/nn/modules/conv.h>
#include <torch/utils.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::models::necks {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// ResNet-50's C2..C5.
const std::vector<int64_t> kResNetChannels = {256, 512, 1024, 2048};

std::vector<int64_t> Shape(const at::Tensor& t) { return t.sizes().vec(); }

// Features of an [N, 3, height, width] image at strides 4..32, rounded up as strided
// convolutions round.
std::vector<at::Tensor> Features(const std::vector<int64_t>& channels, int64_t height,
                                 int64_t width) {
  std::vector<at::Tensor> features;
  for (size_t level = 0; level < channels.size(); ++level) {
    const int64_t stride = int64_t{4} << level;
    features.push_back(at::randn(
        {2, channels[level], (height + stride - 1) / stride, (width + stride - 1) / stride}));
  }
  return features;
}

TEST(FpnTest, EveryLevelKeepsItsSizeAndGetsOutChannels) {
  // 100 x 72: levels 25 x 18, 13 x 9, 7 x 5, 4 x 3, so each upsampling goes to the finer
  // level's exact size, not to twice the coarser one.
  Fpn fpn{FpnOptions(kResNetChannels, 32)};
  torch::NoGradGuard no_grad;
  const std::vector<at::Tensor> pyramid = fpn->forward(Features(kResNetChannels, 100, 72));
  ASSERT_EQ(pyramid.size(), 4u);
  EXPECT_THAT(Shape(pyramid[0]), ElementsAre(2, 32, 25, 18));
  EXPECT_THAT(Shape(pyramid[1]), ElementsAre(2, 32, 13, 9));
  EXPECT_THAT(Shape(pyramid[2]), ElementsAre(2, 32, 7, 5));
  EXPECT_THAT(Shape(pyramid[3]), ElementsAre(2, 32, 4, 3));
}

TEST(FpnTest, InnerChannelsWidenOnlyThePathway) {
  Fpn fpn{FpnOptions({4, 6}, 3).inner_channels(8).bias(false)};
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& item : fpn->named_parameters()) shapes[item.key()] = Shape(item.value());
  EXPECT_THAT(shapes, ElementsAre(Pair("lateral0.weight", ElementsAre(8, 4, 1, 1)),
                                  Pair("lateral1.weight", ElementsAre(8, 6, 1, 1)),
                                  Pair("smooth0.weight", ElementsAre(3, 8, 3, 3)),
                                  Pair("smooth1.weight", ElementsAre(3, 8, 3, 3))));
}

// One channel, two levels, weights set by hand:
//   C2 = [0 1 2; 3 4 5; 6 7 8], C3 = [1 2; 3 4]
//   lateral0 = 1 x + 0, lateral1 = 10 x + 1: L3 = [11 21; 31 41]
//   nearest 2 -> 3 takes rows and columns 0, 0, 1: [11 11 21; 11 11 21; 31 31 41]
//   M2 = C2 + that = [11 12 23; 14 15 26; 37 38 49], M3 = L3
//   smooth0: centre + right neighbour (zero padding) + 0.5
//     P2 = [23.5 35.5 23.5; 29.5 41.5 26.5; 75.5 87.5 49.5]
//   smooth1: centre + lower neighbour: P3 = [42 62; 31 41]
//   P4 (extra) = P3 at even rows and columns: [42]
TEST(FpnTest, HandComputedOneChannelPyramid) {
  Fpn fpn{FpnOptions({1, 1}, 1).extra_max_pool_level(true)};
  {
    torch::NoGradGuard no_grad;
    auto parameters = fpn->named_parameters();
    parameters["lateral0.weight"].fill_(1);
    parameters["lateral0.bias"].fill_(0);
    parameters["lateral1.weight"].fill_(10);
    parameters["lateral1.bias"].fill_(1);
    at::Tensor smooth0 = parameters["smooth0.weight"];
    smooth0.zero_();
    smooth0[0][0][1][1] = 1;
    smooth0[0][0][1][2] = 1;
    parameters["smooth0.bias"].fill_(0.5);
    at::Tensor smooth1 = parameters["smooth1.weight"];
    smooth1.zero_();
    smooth1[0][0][1][1] = 1;
    smooth1[0][0][2][1] = 1;
    parameters["smooth1.bias"].fill_(0);
  }
  const at::Tensor c2 = at::arange(9, at::kFloat).view({1, 1, 3, 3});
  const at::Tensor c3 = at::tensor({1.0f, 2.0f, 3.0f, 4.0f}).view({1, 1, 2, 2});
  torch::NoGradGuard no_grad;
  const std::vector<at::Tensor> pyramid = fpn->forward({c2, c3});
  ASSERT_EQ(pyramid.size(), 3u);
  const at::Tensor p2 = at::tensor({23.5f, 35.5f, 23.5f, 29.5f, 41.5f, 26.5f, 75.5f, 87.5f, 49.5f})
                            .view({1, 1, 3, 3});
  const at::Tensor p3 = at::tensor({42.0f, 62.0f, 31.0f, 41.0f}).view({1, 1, 2, 2});
  EXPECT_TRUE(at::equal(pyramid[0], p2)) << pyramid[0];
  EXPECT_TRUE(at::equal(pyramid[1], p3)) << pyramid[1];
  EXPECT_TRUE(at::equal(pyramid[2], at::full({1, 1, 1, 1}, 42.0f))) << pyramid[2];
}

TEST(FpnTest, ExtraLevelIsStrideTwoMaxPoolOfTheCoarsest) {
  // torchvision's LastLevelMaxPool: max_pool2d(P5, kernel 1, stride 2), i.e. P5's even rows
  // and columns; an odd size rounds up (7 x 5 -> 4 x 3).
  Fpn fpn{FpnOptions(kResNetChannels, 16).extra_max_pool_level(true)};
  torch::NoGradGuard no_grad;
  const std::vector<at::Tensor> pyramid = fpn->forward(Features(kResNetChannels, 224, 160));
  ASSERT_EQ(pyramid.size(), 5u);
  const at::Tensor& p5 = pyramid[3];
  const at::Tensor& p6 = pyramid[4];
  EXPECT_THAT(Shape(p5), ElementsAre(2, 16, 7, 5));
  EXPECT_THAT(Shape(p6), ElementsAre(2, 16, 4, 3));
  EXPECT_TRUE(at::equal(p6, p5.slice(2, 0, 7, 2).slice(3, 0, 5, 2)));
}

TEST(FpnTest, TorchvisionInitialisation) {
  // kaiming_uniform_(a = 1): bound sqrt(6 / ((1 + a^2) fan_in)) = sqrt(3 / fan_in).
  Fpn fpn{FpnOptions({64, 128}, 32)};
  for (const auto& item : fpn->named_parameters()) {
    const at::Tensor& p = item.value();
    if (item.key().find("bias") != std::string::npos) {
      EXPECT_TRUE(at::all(p == 0).item<bool>()) << item.key();
      continue;
    }
    const double bound = std::sqrt(3.0 / static_cast<double>(p[0].numel()));
    EXPECT_LE(p.abs().max().item<double>(), bound) << item.key();
    // LibTorch's default would stay within sqrt(1 / fan_in), a third of the range.
    EXPECT_GT(p.abs().max().item<double>(), 0.9 * bound) << item.key();
  }
}

TEST(FpnTest, WithoutTorchvisionInitTheSeedGivesPlainConvolutionWeights) {
  // Models that re-initialise (DBNet) rely on the FPN drawing nothing beyond LibTorch's
  // default initialisation of each level's lateral and smoothing convolution, in that order.
  at::manual_seed(3);
  Fpn fpn{FpnOptions({4, 6}, 2).inner_channels(8).bias(false).torchvision_init(false)};
  const at::Tensor after_fpn = at::rand({1});
  at::manual_seed(3);
  std::vector<at::Tensor> expected;
  for (int64_t in : {4, 6}) {
    expected.push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(in, 8, 1).bias(false))->weight);
    expected.push_back(
        torch::nn::Conv2d(torch::nn::Conv2dOptions(8, 2, 3).padding(1).bias(false))->weight);
  }
  const std::vector<at::Tensor> actual = fpn->parameters();
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) EXPECT_TRUE(at::equal(actual[i], expected[i])) << i;
  EXPECT_TRUE(at::equal(at::rand({1}), after_fpn));
}

TEST(FpnTest, RejectsAWrongNumberOfLevels) {
  Fpn fpn{FpnOptions(kResNetChannels, 8)};
  std::vector<at::Tensor> features = Features(kResNetChannels, 64, 64);
  features.pop_back();
  try {
    fpn->forward(features);
    ADD_FAILURE() << "expected a c10::Error";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what_without_backtrace(), HasSubstr("expected 4 feature maps"));
    EXPECT_THAT(e.what_without_backtrace(), HasSubstr("got 3"));
  }
}

}  // namespace
}  // namespace vision::models::necks
