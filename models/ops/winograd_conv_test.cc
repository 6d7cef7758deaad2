#include "models/ops/winograd_conv.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>
#include <torch/nn/modules/conv.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <iostream>
#include <tuple>
#include <vector>

#include "core/cpu_convolution.h"
#include "gtest/gtest.h"

namespace vision::models::ops {
namespace {

struct Result {
  at::Tensor output, grad_input, grad_weight;
};

// Forward and both gradients for sum(conv(x, w) * r).
template <typename Conv>
Result Run(Conv conv, const at::Tensor& x, const at::Tensor& w, const at::Tensor& r) {
  const at::Tensor xi = x.clone().requires_grad_();
  const at::Tensor wi = w.clone().requires_grad_();
  const at::Tensor y = conv(xi, wi);
  (y * r).sum().backward();
  return {y.detach(), xi.grad(), wi.grad()};
}

Result Winograd(const at::Tensor& x, const at::Tensor& w, const at::Tensor& r,
                std::array<int64_t, 2> dilation = {1, 1}) {
  return Run(
      [&](const at::Tensor& a, const at::Tensor& b) { return WinogradConv3x3(a, b, dilation); }, x,
      w, r);
}

Result Direct(const at::Tensor& x, const at::Tensor& w, const at::Tensor& r,
              std::array<int64_t, 2> dilation = {1, 1}) {
  return Run(
      [&](const at::Tensor& a, const at::Tensor& b) {
        return at::conv2d(a, b, {}, 1, {dilation[0], dilation[1]}, {dilation[0], dilation[1]});
      },
      x, w, r);
}

// max |a - b| / max |b|.
double RelativeError(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor ref = b.to(at::kDouble);
  return (a.to(at::kDouble) - ref).abs().max().item<double>() / ref.abs().max().item<double>();
}

// [N, C, K, H, W]: odd sizes, sizes under one tile, sizes of whole tiles, a row of one pixel.
const std::vector<std::vector<int64_t>> kShapes = {
    {1, 1, 1, 1, 1},  {1, 2, 3, 2, 3},    {2, 3, 5, 9, 7}, {3, 4, 2, 4, 4},
    {1, 3, 2, 5, 13}, {2, 8, 16, 17, 12}, {1, 5, 4, 1, 9}, {2, 16, 8, 24, 20}};

// In float64 the transforms' rounding is far below the test's threshold: Winograd equals direct
// convolution, outputs and both gradients, for every shape (a wrong coefficient, tile offset
// or crop is off by O(1)).
TEST(WinogradConv3x3Test, EqualsDirectConvolutionInDouble) {
  at::manual_seed(0);
  for (const auto& s : kShapes) {
    SCOPED_TRACE(::testing::Message() << "N C K H W = " << s[0] << " " << s[1] << " " << s[2] << " "
                                      << s[3] << " " << s[4]);
    const at::Tensor x = at::randn({s[0], s[1], s[3], s[4]}, at::kDouble);
    const at::Tensor w = at::randn({s[2], s[1], 3, 3}, at::kDouble);
    const at::Tensor r = at::randn({s[0], s[2], s[3], s[4]}, at::kDouble);
    const Result ours = Winograd(x, w, r);
    const Result direct = Direct(x, w, r);
    ASSERT_EQ(ours.output.sizes(), direct.output.sizes());
    EXPECT_LT(RelativeError(ours.output, direct.output), 1e-12);
    EXPECT_LT(RelativeError(ours.grad_input, direct.grad_input), 1e-12);
    EXPECT_LT(RelativeError(ours.grad_weight, direct.grad_weight), 1e-12);
  }
}

// Dilated layers (padding = dilation) through the polyphase split: dilations that divide the
// size and that do not (the zero rows Polyphase adds), a dilation larger than the image (phases
// of one pixel and phases that are all padding), unequal dilations, and DANet's 2 and 4.
TEST(WinogradConv3x3Test, DilatedEqualsDirectConvolutionInDouble) {
  at::manual_seed(3);
  // N, C, K, H, W, dilation along H, along W.
  const std::vector<std::vector<int64_t>> shapes = {
      {1, 3, 2, 8, 8, 2, 2},    {2, 4, 5, 9, 7, 2, 2},  {1, 2, 3, 17, 13, 4, 4},
      {2, 3, 2, 3, 2, 4, 4},    {1, 2, 2, 1, 1, 2, 2},  {1, 3, 4, 10, 11, 2, 3},
      {2, 8, 16, 16, 16, 4, 4}, {1, 5, 3, 6, 19, 1, 2}, {1, 2, 2, 12, 12, 3, 1}};
  for (const auto& s : shapes) {
    SCOPED_TRACE(::testing::Message()
                 << "N C K H W dilation = " << s[0] << " " << s[1] << " " << s[2] << " " << s[3]
                 << " " << s[4] << " " << s[5] << "x" << s[6]);
    const at::Tensor x = at::randn({s[0], s[1], s[3], s[4]}, at::kDouble);
    const at::Tensor w = at::randn({s[2], s[1], 3, 3}, at::kDouble);
    const at::Tensor r = at::randn({s[0], s[2], s[3], s[4]}, at::kDouble);
    const Result ours = Winograd(x, w, r, {s[5], s[6]});
    const Result direct = Direct(x, w, r, {s[5], s[6]});
    ASSERT_EQ(ours.output.sizes(), direct.output.sizes());
    EXPECT_TRUE(ours.output.is_contiguous());
    EXPECT_LT(RelativeError(ours.output, direct.output), 1e-12);
    EXPECT_LT(RelativeError(ours.grad_input, direct.grad_input), 1e-12);
    EXPECT_LT(RelativeError(ours.grad_weight, direct.grad_weight), 1e-12);
  }
}

// In float32 the transforms add rounding: against the float64 result, Winograd's largest error
// relative to the largest magnitude stays below 5e-5 and within 25x direct float32 convolution's
// own or 1e-5, whichever is larger (measured here: outputs 6e-6 at 64 channels and 9e-6 at 256
// and at 128 dilated by 4, gradients 3-9e-6, where direct convolution gives 3e-7 to 1.6e-6: the
// 8-28x of F(4x4, 3x3)'s larger coefficients; oneDNN's dilated kernel has the smallest error).
TEST(WinogradConv3x3Test, FloatErrorIsBoundedAgainstDouble) {
  at::manual_seed(1);
  // N, C, K, H, W, dilation.
  for (const auto& s : std::vector<std::vector<int64_t>>{
           {2, 64, 64, 20, 20, 1}, {1, 256, 64, 9, 11, 1}, {1, 128, 128, 16, 16, 4}}) {
    SCOPED_TRACE(::testing::Message() << "C K dilation = " << s[1] << " " << s[2] << " " << s[5]);
    const at::Tensor x = at::randn({s[0], s[1], s[3], s[4]});
    const at::Tensor w = at::randn({s[2], s[1], 3, 3}) * 0.05;
    const at::Tensor r = at::randn({s[0], s[2], s[3], s[4]});
    const std::array<int64_t, 2> d = {s[5], s[5]};
    const Result exact = Direct(x.to(at::kDouble), w.to(at::kDouble), r.to(at::kDouble), d);
    const Result ours = Winograd(x, w, r, d);
    const Result direct = Direct(x, w, r, d);
    const std::vector<std::tuple<const char*, at::Tensor, at::Tensor, at::Tensor>> parts = {
        {"output", ours.output, direct.output, exact.output},
        {"grad_input", ours.grad_input, direct.grad_input, exact.grad_input},
        {"grad_weight", ours.grad_weight, direct.grad_weight, exact.grad_weight}};
    for (const auto& [name, winograd, aten, reference] : parts) {
      const double ours_error = RelativeError(winograd, reference);
      const double aten_error = RelativeError(aten, reference);
      EXPECT_LT(ours_error, 5e-5) << name;
      EXPECT_LT(ours_error, std::max(25 * aten_error, 1e-5)) << name << ": ATen's " << aten_error;
      std::cout << name << ": Winograd " << ours_error << ", direct " << aten_error
                << " relative to float64\n";
    }
  }
}

TEST(WinogradConv3x3Test, GradientOfOnlyTheNeededInput) {
  const at::Tensor x = at::randn({1, 2, 6, 6});
  const at::Tensor w = at::randn({3, 2, 3, 3}).requires_grad_();
  WinogradConv3x3(x, w).sum().backward();
  EXPECT_FALSE(x.grad().defined());
  ASSERT_TRUE(w.grad().defined());
  const at::Tensor w2 = w.detach().clone().requires_grad_();
  at::conv2d(x, w2, {}, 1, 1).sum().backward();
  EXPECT_LT(RelativeError(w.grad(), w2.grad()), 1e-5);
}

TEST(WinogradConv3x3Test, RefusesWhatItCannotCompute) {
  EXPECT_THROW(WinogradConv3x3(at::randn({1, 2, 4, 4}), at::randn({3, 2, 5, 5})), c10::Error);
  EXPECT_THROW(WinogradConv3x3(at::randn({1, 2, 4, 4}), at::randn({3, 4, 3, 3})), c10::Error);
  EXPECT_THROW(WinogradConv3x3(at::randn({1, 2, 4, 4}).to(at::kHalf), at::randn({3, 2, 3, 3})),
               c10::Error);
  EXPECT_THROW(WinogradConv3x3(at::randn({1, 2, 4, 4}).transpose(2, 3), at::randn({3, 2, 3, 3})),
               c10::Error);
  EXPECT_THROW(WinogradConv3x3(at::randn({1, 2, 4, 4}), at::randn({3, 2, 3, 3}), {0, 1}),
               c10::Error);
}

TEST(WinogradConv3x3Test, TileCoverage) {
  EXPECT_DOUBLE_EQ(WinogradTileCoverage(16, 16, {1, 1}), 1.0);
  EXPECT_DOUBLE_EQ(WinogradTileCoverage(16, 16, {4, 4}), 1.0);         // 4 x 4 components
  EXPECT_DOUBLE_EQ(WinogradTileCoverage(16, 16, {8, 8}), 0.25);        // 2 x 2
  EXPECT_DOUBLE_EQ(WinogradTileCoverage(16, 16, {16, 16}), 1.0 / 16);  // one pixel each
  EXPECT_DOUBLE_EQ(WinogradTileCoverage(5, 9, {1, 1}), 45.0 / 96);
  EXPECT_DOUBLE_EQ(WinogradTileCoverage(10, 12, {2, 3}), 20.0 / 32);  // 5 x 4 components
}

torch::nn::detail::ConvNdOptions<2> Options3x3(int64_t in, int64_t out) {
  return torch::nn::detail::ConvNdOptions<2>(in, out, 3).padding(1).bias(false);
}

TEST(WinogradConv3x3Test, AppliesOnlyToPlainThreeByThreeInFloatOrDouble) {
  const at::Tensor x = at::randn({1, 4, 8, 8});
  const at::Tensor w = at::randn({4, 4, 3, 3});
  EXPECT_TRUE(WinogradConv3x3Applies(x, w, false, Options3x3(4, 4)));
  EXPECT_FALSE(WinogradConv3x3Applies(x, w, true, Options3x3(4, 4)));
  EXPECT_FALSE(WinogradConv3x3Applies(x, w, false, Options3x3(4, 4).stride(2)));
  EXPECT_TRUE(WinogradConv3x3Applies(x, w, false, Options3x3(4, 4).dilation(2).padding(2)));
  EXPECT_TRUE(
      WinogradConv3x3Applies(x, w, false, Options3x3(4, 4).dilation({4, 2}).padding({4, 2})));
  EXPECT_FALSE(WinogradConv3x3Applies(x, w, false, Options3x3(4, 4).dilation(2).padding(1)));
  EXPECT_FALSE(WinogradConv3x3Applies(x, w, false, Options3x3(4, 4).dilation(2).padding({2, 1})));
  EXPECT_FALSE(WinogradConv3x3Applies(x, w, false, Options3x3(4, 4).padding(0)));
  EXPECT_FALSE(WinogradConv3x3Applies(x, w, false, Options3x3(4, 4).padding(torch::kSame)));
  EXPECT_FALSE(WinogradConv3x3Applies(x, w, false, Options3x3(4, 4).groups(2)));
  EXPECT_FALSE(WinogradConv3x3Applies(x, w, false, Options3x3(4, 4).padding_mode(torch::kReflect)));
  EXPECT_FALSE(WinogradConv3x3Applies(x, w, false,
                                      torch::nn::detail::ConvNdOptions<2>(4, 4, 1).bias(false)));
  EXPECT_TRUE(
      WinogradConv3x3Applies(x.to(at::kDouble), w.to(at::kDouble), false, Options3x3(4, 4)));
  EXPECT_FALSE(WinogradConv3x3Applies(x.to(at::kDouble), w, false, Options3x3(4, 4)));
  EXPECT_FALSE(WinogradConv3x3Applies(x.to(at::kHalf), w.to(at::kHalf), false, Options3x3(4, 4)));
  EXPECT_FALSE(WinogradConv3x3Applies(x.contiguous(at::MemoryFormat::ChannelsLast), w, false,
                                      Options3x3(4, 4)));
  {
    at::autocast::set_autocast_enabled(at::kCPU, true);
    EXPECT_FALSE(WinogradConv3x3Applies(x, w, false, Options3x3(4, 4)));
    at::autocast::set_autocast_enabled(at::kCPU, false);
  }
}

// ops::Conv2d is torch::nn::Conv2d bit for bit under kATen, and WinogradConv3x3 bit for bit
// under kWinograd where that applies (ATen's again where it does not: a stride-2 layer).
TEST(WinogradConv3x3Test, Conv2dModuleFollowsTheProcessSetting) {
  at::manual_seed(2);
  const at::Tensor x = at::randn({2, 8, 10, 10});
  Conv2d ours(torch::nn::Conv2dOptions(8, 6, 3).padding(1).bias(false));
  torch::nn::Conv2d plain(torch::nn::Conv2dOptions(8, 6, 3).padding(1).bias(false));
  plain->weight.data().copy_(ours->weight.data());
  {
    core::ScopedCpuConvolution aten(core::CpuConvolution::kATen);
    EXPECT_TRUE(at::equal(ours->forward(x), plain->forward(x)));
  }
  {
    core::ScopedCpuConvolution winograd(core::CpuConvolution::kWinograd);
    const at::Tensor y = ours->forward(x);
    EXPECT_TRUE(at::equal(y, WinogradConv3x3(x, ours->weight.detach())));
    EXPECT_FALSE(at::equal(y, plain->forward(x)));  // another algorithm, other last bits
    Conv2d strided(torch::nn::Conv2dOptions(8, 6, 3).padding(1).bias(false).stride(2));
    torch::nn::Conv2d plain_strided(
        torch::nn::Conv2dOptions(8, 6, 3).padding(1).bias(false).stride(2));
    plain_strided->weight.data().copy_(strided->weight.data());
    EXPECT_TRUE(at::equal(strided->forward(x), plain_strided->forward(x)));
    Conv2d dilated(torch::nn::Conv2dOptions(8, 6, 3).padding(2).dilation(2).bias(false));
    EXPECT_TRUE(
        at::equal(dilated->forward(x), WinogradConv3x3(x, dilated->weight.detach(), {2, 2})));
    // Dilated by 8, the 10 x 10 input's components are 2 x 2 and 1 x 2 pixels: tiles covered
    // 16%, under kMinTileCoverage, so ATen's convolution, bit for bit.
    const auto wide = torch::nn::Conv2dOptions(8, 6, 3).padding(8).dilation(8).bias(false);
    Conv2d sparse(wide);
    torch::nn::Conv2d plain_sparse(wide);
    plain_sparse->weight.data().copy_(sparse->weight.data());
    EXPECT_TRUE(at::equal(sparse->forward(x), plain_sparse->forward(x)));
  }
  EXPECT_EQ(core::GetCpuConvolution(), core::CpuConvolution::kATen);
  // Same parameter names as torch::nn::Conv2d, so checkpoints are interchangeable.
  EXPECT_EQ(ours->named_parameters().keys(), plain->named_parameters().keys());
}

}  // namespace
}  // namespace vision::models::ops
