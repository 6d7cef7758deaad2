#include "engine/loss_scaler.h"

#include <limits>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>

#include "engine/ema.h"
#include "gtest/gtest.h"

namespace vision::engine {
namespace {

at::Tensor ParamWithGrad(std::vector<float> grad) {
  at::Tensor p = at::zeros({static_cast<int64_t>(grad.size())}).requires_grad_(true);
  p.mutable_grad() = at::tensor(grad);
  return p;
}

TEST(LossScalerTest, SkipsInfBacksOffAndGrowsBackAfterTheInterval) {
  LossScalerOptions options;
  options.enabled = true;
  options.init_scale = 1024;
  options.growth_interval = 3;
  LossScaler scaler(options);
  EXPECT_DOUBLE_EQ(scaler.Scale(at::ones({})).item<double>(), 1024);

  at::Tensor good = ParamWithGrad({2048, -1024});
  EXPECT_TRUE(scaler.UnscaleAndCheckFinite({good}));
  EXPECT_TRUE(at::equal(good.grad(), at::tensor(std::vector<float>{2, -1})));

  at::Tensor bad = ParamWithGrad({1, std::numeric_limits<float>::infinity()});
  EXPECT_FALSE(scaler.UnscaleAndCheckFinite({good, bad}));
  scaler.Update(false);
  EXPECT_DOUBLE_EQ(scaler.scale(), 512);
  EXPECT_EQ(scaler.skipped_steps(), 1);

  scaler.Update(true);
  scaler.Update(true);
  EXPECT_DOUBLE_EQ(scaler.scale(), 512);
  scaler.Update(true);  // third finite step in a row
  EXPECT_DOUBLE_EQ(scaler.scale(), 1024);
  EXPECT_EQ(scaler.growth_tracker(), 0);

  LossScaler restored(options);
  restored.LoadState(scaler.State());
  EXPECT_DOUBLE_EQ(restored.scale(), 1024);
  EXPECT_EQ(restored.skipped_steps(), 1);
}

TEST(LossScalerTest, DisabledOnlyChecksFiniteness) {
  LossScaler scaler(LossScalerOptions{});
  at::Tensor p = ParamWithGrad({4, 8});
  EXPECT_TRUE(scaler.UnscaleAndCheckFinite({p}));
  EXPECT_TRUE(at::equal(p.grad(), at::tensor(std::vector<float>{4, 8})));
  at::Tensor nan = ParamWithGrad({std::numeric_limits<float>::quiet_NaN()});
  EXPECT_FALSE(scaler.UnscaleAndCheckFinite({nan}));
  scaler.Update(false);
  EXPECT_DOUBLE_EQ(scaler.scale(), 1.0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
}

TEST(ModelEmaTest, AveragesAndSwaps) {
  torch::nn::Linear model(1, 1);
  {
    at::NoGradGuard no_grad;
    model->weight.fill_(1.0);
  }
  ModelEma ema(*model, 0.5);
  {
    at::NoGradGuard no_grad;
    model->weight.fill_(3.0);
  }
  ema.Update(*model);  // 0.5 * 1 + 0.5 * 3
  EXPECT_FLOAT_EQ(ema.values().at("weight").item<float>(), 2.0f);
  ema.Swap(*model);
  EXPECT_FLOAT_EQ(model->weight.item<float>(), 2.0f);
  ema.Swap(*model);
  EXPECT_FLOAT_EQ(model->weight.item<float>(), 3.0f);
}

}  // namespace
}  // namespace vision::engine
