#include "models/ops/deform_conv.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/utils.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/ops/golden_for_test.h"

namespace vision::models::ops {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Geometry {
  std::vector<int64_t> kernel;
  int64_t stride;
  int64_t padding;
  int64_t dilation;
};

// Stride 1 and 2, dilation 2, and a non-square kernel (taps must be row-major like the weight).
const std::vector<Geometry> kGeometries = {
    {{3, 3}, 1, 1, 1}, {{3, 3}, 2, 1, 1}, {{3, 3}, 1, 2, 2}, {{3, 2}, 2, 0, 1}};

DeformConv2d MakeDeformConv(const Geometry& g, bool bias) {
  DeformConv2d conv(DeformConv2dOptions(3, 4, {g.kernel[0], g.kernel[1]})
                        .stride(g.stride)
                        .padding(g.padding)
                        .dilation(g.dilation)
                        .bias(bias));
  if (bias) {
    torch::NoGradGuard no_grad;
    conv->bias.uniform_(-1, 1);
  }
  return conv;
}

// out[y][x] = in[y + dy][x + dx], zero where that falls outside.
at::Tensor Shift(const at::Tensor& in, int64_t dy, int64_t dx) {
  const int64_t ay = dy < 0 ? -dy : dy;
  const int64_t ax = dx < 0 ? -dx : dx;
  return at::constant_pad_nd(in, {ax, ax, ay, ay})
      .narrow(2, ay + dy, in.size(2))
      .narrow(3, ax + dx, in.size(3));
}

TEST(DeformConv2dTest, ZeroOffsetBranchIsHalfThePlainConvolution) {
  torch::manual_seed(0);
  for (const Geometry& g : kGeometries) {
    for (bool bias : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "kernel " << g.kernel[0] << "x" << g.kernel[1] << " stride " << g.stride
                   << " dilation " << g.dilation << " bias " << bias);
      DeformConv2d conv = MakeDeformConv(g, bias);
      const at::Tensor x = at::randn({2, 3, 9, 11});
      const at::Tensor out = conv->forward(x);
      // sigmoid(0) = 0.5 scales the sampled columns, not the bias.
      at::Tensor expected = 0.5 * at::conv2d(x, conv->weight, {}, g.stride, g.padding, g.dilation);
      if (bias) expected = expected + conv->bias.view({1, -1, 1, 1});
      ASSERT_EQ(out.sizes(), expected.sizes());
      EXPECT_LT((out - expected).abs().max().item<double>(), 1e-5);
    }
  }
}

TEST(DeformConv2dTest, OutputShapesFollowTheConvolutionArithmetic) {
  const at::Tensor x = at::randn({1, 3, 13, 8});
  for (const Geometry& g : kGeometries) {
    DeformConv2d conv = MakeDeformConv(g, false);
    torch::NoGradGuard no_grad;
    EXPECT_EQ(conv->forward(x).sizes(),
              at::conv2d(x, conv->weight, {}, g.stride, g.padding, g.dilation).sizes());
  }
  DeformConv2d conv = MakeDeformConv(kGeometries[1], false);
  EXPECT_THAT(conv->forward(at::randn({2, 3, 13, 8})).sizes(), ElementsAre(2, 4, 7, 4));
  // A 1x1 input works too (grid normalisation must not divide by size - 1).
  EXPECT_THAT(conv->forward(at::randn({1, 3, 1, 1})).sizes(), ElementsAre(1, 4, 1, 1));
}

TEST(DeformConv2dTest, PerTapMaskScalesTheKernelTaps) {
  torch::manual_seed(1);
  const at::Tensor x = at::randn({1, 3, 6, 7});
  const at::Tensor weight = at::randn({4, 3, 3, 3});
  const at::Tensor taps = at::arange(1, 10, at::kFloat) / 10;
  const at::Tensor mask = taps.view({1, 9, 1, 1}).expand({1, 9, 6, 7});
  const at::Tensor out =
      ModulatedDeformConv2d(x, at::zeros({1, 18, 6, 7}), mask, weight, {}, {1, 1}, {1, 1}, {1, 1});
  const at::Tensor expected = at::conv2d(x, weight * taps.view({1, 1, 3, 3}), {}, 1, 1);
  EXPECT_LT((out - expected).abs().max().item<double>(), 1e-5);
}

TEST(DeformConv2dTest, IntegerOffsetsConvolveTheShiftedInput) {
  torch::manual_seed(2);
  const at::Tensor x = at::randn({2, 3, 8, 9});
  const at::Tensor weight = at::randn({4, 3, 3, 3});
  const at::Tensor bias = at::randn({4});
  struct Case {
    int64_t dy, dx, stride, padding, dilation;
  };
  for (const Case& c :
       std::vector<Case>{{1, 0, 1, 1, 1}, {0, -2, 1, 1, 1}, {-1, 2, 2, 1, 1}, {2, 1, 1, 2, 2}}) {
    SCOPED_TRACE(::testing::Message() << "offset (" << c.dy << ", " << c.dx << ") stride "
                                      << c.stride << " dilation " << c.dilation);
    // The deformable convolution also reads real pixels where the plain one reads its
    // padding, so the padding goes in before the shift.
    const at::Tensor padded = at::constant_pad_nd(x, {c.padding, c.padding, c.padding, c.padding});
    const at::Tensor expected = at::conv2d(Shift(padded, c.dy, c.dx), weight, bias, c.stride,
                                           std::vector<int64_t>{0, 0}, c.dilation);
    const int64_t h = expected.size(2);
    const int64_t w = expected.size(3);
    const at::Tensor offset = at::tensor({static_cast<float>(c.dy), static_cast<float>(c.dx)})
                                  .view({1, 1, 2, 1, 1})
                                  .expand({2, 9, 2, h, w})
                                  .reshape({2, 18, h, w});
    const at::Tensor out =
        ModulatedDeformConv2d(x, offset, at::ones({2, 9, h, w}), weight, bias, {c.stride, c.stride},
                              {c.padding, c.padding}, {c.dilation, c.dilation});
    EXPECT_LT((out - expected).abs().max().item<double>(), 1e-5);
  }
}

TEST(DeformConv2dTest, FractionalOffsetsInterpolateBilinearlyWithZerosOutside) {
  // A 1x1 kernel of weight 2 reads one sample per output pixel.
  const at::Tensor image =
      at::tensor({1.f, 2.f, 0.f, 4.f, 8.f, 3.f, 0.f, 5.f, 6.f}).view({1, 1, 3, 3});
  at::Tensor offset = at::zeros({1, 2, 3, 3});
  at::Tensor mask = at::ones({1, 1, 3, 3});
  const auto set = [&](int64_t y, int64_t x, float dy, float dx, float m) {
    offset[0][0][y][x] = dy;
    offset[0][1][y][x] = dx;
    mask[0][0][y][x] = m;
  };
  set(0, 0, 0.5f, 0.25f, 1.f);      // (0.5, 0.25)
  set(2, 2, 0.5f, -0.5f, 1.f);      // (2.5, 1.5): the lower corners are outside
  set(0, 1, -0.5f, -1.5f, 0.5f);    // (-0.5, -0.5): only pixel (0, 0) is inside
  set(1, 1, -2.f, 0.f, 1.f);        // (-1, 1): entirely outside
  set(1, 2, 0.75f, -0.25f, 0.25f);  // (1.75, 1.75)
  const at::Tensor out = ModulatedDeformConv2d(image, offset, mask, at::full({1, 1, 1, 1}, 2.f), {},
                                               {1, 1}, {0, 0}, {1, 1});
  // Bilinear by hand: sum of corner * (1 - |y - row|) * (1 - |x - col|).
  const double at_0_0 = 0.5 * 0.75 * 1 + 0.5 * 0.25 * 2 + 0.5 * 0.75 * 4 + 0.5 * 0.25 * 8;
  const double at_2_2 = 0.5 * 0.5 * 5 + 0.5 * 0.5 * 6;
  const double at_0_1 = 0.5 * 0.5 * 1;
  const double at_1_2 = 0.25 * 0.25 * 8 + 0.25 * 0.75 * 3 + 0.75 * 0.25 * 5 + 0.75 * 0.75 * 6;
  EXPECT_NEAR(out[0][0][0][0].item<double>(), 2 * at_0_0, 1e-5);
  EXPECT_NEAR(out[0][0][2][2].item<double>(), 2 * at_2_2, 1e-5);
  EXPECT_NEAR(out[0][0][0][1].item<double>(), 2 * 0.5 * at_0_1, 1e-5);
  EXPECT_NEAR(out[0][0][1][1].item<double>(), 0.0, 1e-6);
  EXPECT_NEAR(out[0][0][1][2].item<double>(), 2 * 0.25 * at_1_2, 1e-5);
  // Untouched pixels read themselves.
  EXPECT_NEAR(out[0][0][2][0].item<double>(), 0.0, 1e-6);
  EXPECT_NEAR(out[0][0][1][0].item<double>(), 8.0, 1e-5);
}

// Central differences of sum(out * probe) against autograd, in double precision, for every
// element of every input. Offsets stay away from integers, where bilinear has kinks.
TEST(DeformConv2dTest, GradientsMatchFiniteDifferences) {
  torch::manual_seed(3);
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  // stride 2, padding 2, dilation 2 on 6x7: output 3x4.
  std::vector<at::Tensor> args = {
      at::randn({1, 2, 6, 7}, opts),
      (at::rand({1, 18, 3, 4}, opts) * 0.8 + 0.1) + at::randint(-2, 2, {1, 18, 3, 4}, opts),
      at::rand({1, 9, 3, 4}, opts),
      at::randn({3, 2, 3, 3}, opts),
      at::randn({3}, opts),
  };
  const std::vector<std::string> names = {"input", "offset", "mask", "weight", "bias"};
  const at::Tensor probe = at::randn({1, 3, 3, 4}, opts);
  const auto loss = [&](const std::vector<at::Tensor>& a) {
    return (ModulatedDeformConv2d(a[0], a[1], a[2], a[3], a[4], {2, 2}, {2, 2}, {2, 2}) * probe)
        .sum();
  };
  for (at::Tensor& a : args) a.requires_grad_(true);
  loss(args).backward();
  torch::NoGradGuard no_grad;
  constexpr double kEps = 1e-6;
  for (size_t i = 0; i < args.size(); ++i) {
    const at::Tensor analytic = args[i].grad();
    ASSERT_TRUE(analytic.defined()) << names[i];
    EXPECT_GT(analytic.abs().max().item<double>(), 0.0) << names[i];
    at::Tensor flat = args[i].view(-1);
    for (int64_t j = 0; j < flat.numel(); ++j) {
      const double saved = flat[j].item<double>();
      flat[j] = saved + kEps;
      const double plus = loss(args).item<double>();
      flat[j] = saved - kEps;
      const double minus = loss(args).item<double>();
      flat[j] = saved;
      const double numeric = (plus - minus) / (2 * kEps);
      ASSERT_NEAR(analytic.view(-1)[j].item<double>(), numeric, 1e-6 * (1 + std::abs(numeric)))
          << names[i] << " element " << j;
    }
  }
}

// torchvision.ops.deform_conv2d's own kernel (testdata/make_deform_conv_golden.py) on random
// float64 cases with offsets up to 3 pixels: outputs and all five gradients.
TEST(DeformConv2dTest, MatchesTorchvisionDeformConv2d) {
  const std::map<std::string, std::map<std::string, at::Tensor>> golden =
      LoadGoldenCases("deform_conv", "models/ops/testdata/deform_conv_golden.pth");
  struct Case {
    std::string name;
    int64_t stride, padding, dilation;
  };
  for (const Case& c : std::vector<Case>{{"s1p1d1", 1, 1, 1}, {"s2p2d2", 2, 2, 2}}) {
    SCOPED_TRACE(c.name);
    ASSERT_EQ(golden.count(c.name), 1u);
    const std::map<std::string, at::Tensor>& tensors = golden.at(c.name);
    const auto get = [&](const std::string& key) {
      const auto it = tensors.find(key);
      EXPECT_NE(it, tensors.end()) << key;
      return it == tensors.end() ? at::Tensor() : it->second;
    };
    const std::vector<std::string> names = {"input", "offset", "mask", "weight", "bias"};
    std::vector<at::Tensor> args;
    for (const std::string& name : names) args.push_back(get(name).clone().requires_grad_(true));
    ASSERT_EQ(args[0].scalar_type(), at::kDouble);
    const at::Tensor out =
        ModulatedDeformConv2d(args[0], args[1], args[2], args[3], args[4], {c.stride, c.stride},
                              {c.padding, c.padding}, {c.dilation, c.dilation});
    ASSERT_EQ(out.sizes(), get("output").sizes());
    EXPECT_LT((out - get("output")).abs().max().item<double>(), 1e-10);
    (out * get("probe")).sum().backward();
    for (size_t i = 0; i < names.size(); ++i) {
      EXPECT_LT((args[i].grad() - get("grad_" + names[i])).abs().max().item<double>(), 1e-10)
          << names[i];
    }
  }
}

TEST(DeformConv2dTest, OffsetBranchLearnsFromZero) {
  torch::manual_seed(4);
  DeformConv2d conv(DeformConv2dOptions(3, 4, 3).padding(1));
  conv->forward(at::randn({1, 3, 5, 6})).pow(2).sum().backward();
  // Zero offsets still give the offsets and mask logits a gradient (bilinear slope, sigmoid'),
  // so the branch can leave its start.
  EXPECT_GT(conv->conv_offset->weight.grad().abs().max().item<double>(), 0.0);
  EXPECT_GT(conv->conv_offset->bias.grad().narrow(0, 0, 18).abs().max().item<double>(), 0.0);
  EXPECT_GT(conv->conv_offset->bias.grad().narrow(0, 18, 9).abs().max().item<double>(), 0.0);
  EXPECT_GT(conv->weight.grad().abs().max().item<double>(), 0.0);
}

TEST(DeformConv2dTest, ParametersAreNamedAsMmcv) {
  DeformConv2d conv(DeformConv2dOptions(8, 16, 3).bias(false));
  EXPECT_THAT(conv->named_parameters().keys(),
              ElementsAre("weight", "conv_offset.weight", "conv_offset.bias"));
  EXPECT_THAT(conv->conv_offset->weight.sizes(), ElementsAre(27, 8, 3, 3));
  EXPECT_TRUE(conv->conv_offset->weight.eq(0).all().item<bool>());
  EXPECT_TRUE(conv->conv_offset->bias.eq(0).all().item<bool>());
  // mmcv's init: uniform in +-1/sqrt(8 * 9).
  EXPECT_LE(conv->weight.abs().max().item<double>(), 1.0 / std::sqrt(72.0));
  DeformConv2d with_bias(DeformConv2dOptions(8, 16, 3));
  EXPECT_THAT(with_bias->named_parameters().keys(),
              ElementsAre("weight", "bias", "conv_offset.weight", "conv_offset.bias"));

  // clone() (Cloneable) rebuilds the same parameters with their own storage.
  const auto copy = std::dynamic_pointer_cast<DeformConv2dImpl>(conv->clone());
  ASSERT_NE(copy, nullptr);
  EXPECT_TRUE(at::equal(copy->weight, conv->weight));
  EXPECT_NE(copy->weight.data_ptr(), conv->weight.data_ptr());
  EXPECT_EQ(copy->named_parameters().size(), 3u);

  torch::nn::Sequential net(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 8, 1)), conv);
  EXPECT_THAT(OffsetBranchParameterNames(*net),
              ElementsAre("1.conv_offset.weight", "1.conv_offset.bias"));
}

TEST(DeformConv2dTest, InconsistentShapesThrow) {
  const at::Tensor x = at::randn({1, 3, 5, 5});
  const at::Tensor weight = at::randn({4, 3, 3, 3});
  EXPECT_THAT(
      [&] {
        ModulatedDeformConv2d(x, at::zeros({1, 18, 4, 5}), at::ones({1, 9, 5, 5}), weight, {},
                              {1, 1}, {1, 1}, {1, 1});
      },
      ::testing::ThrowsMessage<c10::Error>(HasSubstr("offset must be [1, 18, 5, 5]")));
  EXPECT_THROW(ModulatedDeformConv2d(x, at::zeros({1, 18, 5, 5}), at::ones({1, 9, 5, 5}),
                                     at::randn({4, 2, 3, 3}), {}, {1, 1}, {1, 1}, {1, 1}),
               c10::Error);
}

}  // namespace
}  // namespace vision::models::ops
