#include "engine/optimizer_step.h"

#include <cmath>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/utils/clip_grad.h>

#include "gtest/gtest.h"

namespace vision::engine {
namespace {

std::vector<at::Tensor> ParamsWithGrads(double grad_scale) {
  at::manual_seed(3);
  std::vector<at::Tensor> params;
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{4, 3}, {7}, {2, 2, 3}, {5}}) {
    at::Tensor p = at::randn(shape).requires_grad_(true);
    p.mutable_grad() = at::randn(shape) * grad_scale;
    params.push_back(p);
  }
  params[3].mutable_grad() = at::Tensor();  // a parameter without a gradient
  return params;
}

// The same arithmetic as LibTorch's clip_grad_norm_, so the same bits: the norm it returns
// and the clipped gradients, for a norm above the bound (clipped) and below it (unchanged).
TEST(ClipGradNormTest, EqualsLibTorchsBitwiseWithoutReadingTheNorm) {
  for (double grad_scale : {10.0, 1e-3}) {
    std::vector<at::Tensor> ours = ParamsWithGrads(grad_scale);
    std::vector<at::Tensor> theirs = ParamsWithGrads(grad_scale);
    const at::Tensor norm = ClipGradNorm(ours, 2.5);
    const double expected = torch::nn::utils::clip_grad_norm_(theirs, 2.5);
    EXPECT_EQ(norm.dim(), 0);
    EXPECT_EQ(norm.item<double>(), expected) << "gradient scale " << grad_scale;
    for (size_t i = 0; i < ours.size(); ++i) {
      ASSERT_EQ(ours[i].grad().defined(), theirs[i].grad().defined());
      if (!ours[i].grad().defined()) continue;
      EXPECT_TRUE(at::equal(ours[i].grad(), theirs[i].grad()))
          << "gradient scale " << grad_scale << ", parameter " << i;
    }
  }
}

TEST(GradNormTest, IsTheGlobalL2NormOfTheDefinedGradients) {
  const std::vector<at::Tensor> params = ParamsWithGrads(1.0);
  double sum = 0;
  for (const at::Tensor& p : params) {
    if (p.grad().defined()) sum += p.grad().to(at::kDouble).pow(2).sum().item<double>();
  }
  EXPECT_NEAR(GradNorm(params).item<double>(), std::sqrt(sum), 1e-14 * std::sqrt(sum));
  EXPECT_EQ(GradNorm({}).item<double>(), 0.0);
}

}  // namespace
}  // namespace vision::engine
