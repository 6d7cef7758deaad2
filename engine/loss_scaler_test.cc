#include "engine/loss_scaler.h"

#include <limits>
#include <string>
#include <vector>

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

// UnscaleAndRecord keeps the same rules on the device: the flag it returns, the unscaled
// gradients, the scale, growth tracker and skip count after every step of a sequence that backs
// off, grows and skips, against the host's UnscaleAndCheckFinite + Update; a checkpoint of
// either restores the other.
TEST(LossScalerTest, RecordOnTheDeviceFollowsTheHostRules) {
  for (bool enabled : {true, false}) {
    LossScalerOptions options;
    options.enabled = enabled;
    options.init_scale = 1024;
    options.growth_interval = 3;
    LossScaler host(options), device(options);
    const float inf = std::numeric_limits<float>::infinity();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const std::vector<std::vector<float>> steps = {
        {2048, -1024}, {1, inf}, {512, 8}, {4, 4}, {2, nan}, {8, 8}, {8, 8}, {8, 8}, {16, 2}};
    for (size_t i = 0; i < steps.size(); ++i) {
      const std::string label =
          (enabled ? "enabled, step " : "disabled, step ") + std::to_string(i);
      at::Tensor on_host = ParamWithGrad(steps[i]);
      at::Tensor on_device = ParamWithGrad(steps[i]);
      EXPECT_DOUBLE_EQ(device.Scale(at::ones({})).item<double>(),
                       host.Scale(at::ones({})).item<double>())
          << label;
      const bool finite = host.UnscaleAndCheckFinite({on_host});
      host.Update(finite);
      const at::Tensor flag = device.UnscaleAndRecord({on_device});
      EXPECT_EQ(flag.dim(), 0) << label;
      EXPECT_EQ(flag.item<float>(), finite ? 0.0f : 1.0f) << label;
      if (finite) {
        EXPECT_TRUE(at::equal(on_device.grad(), on_host.grad())) << label;
      }
      EXPECT_DOUBLE_EQ(device.scale(), host.scale()) << label;
      EXPECT_EQ(device.growth_tracker(), host.growth_tracker()) << label;
      EXPECT_EQ(device.skipped_steps(), host.skipped_steps()) << label;
    }
    EXPECT_EQ(device.skipped_steps(), 2);
    EXPECT_DOUBLE_EQ(device.scale(), enabled ? 512 : 1);  // 1024 / 2 / 2 * 2
    LossScaler restored(options);
    restored.LoadState(device.State());
    EXPECT_EQ(restored.State(), host.State());
    // Back to the host path after the device one: the state comes along.
    at::Tensor p = ParamWithGrad({4, 4});
    EXPECT_TRUE(device.UnscaleAndCheckFinite({p}));
    device.Update(true);
    host.Update(true);
    EXPECT_EQ(device.State(), host.State());
  }
}

TEST(ModelEmaTest, UpdateUnlessSkipsOnTheFlag) {
  torch::nn::Linear model(2, 1);
  ModelEma ema(*model, 0.75);
  ModelEma reference(*model, 0.75);
  {
    at::NoGradGuard no_grad;
    model->weight.add_(1.0);
  }
  const at::Tensor before = ema.values().at("weight").clone();
  ema.UpdateUnless(*model, at::ones({}));
  EXPECT_TRUE(at::equal(ema.values().at("weight"), before));
  ema.UpdateUnless(*model, at::zeros({}));
  reference.Update(*model);
  for (const auto& [name, value] : reference.values()) {
    EXPECT_TRUE(at::allclose(ema.values().at(name), value, 1e-6, 1e-7)) << name;
  }
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
