#include <cmath>
#include <memory>
#include <utility>

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>

#include "core/optimizer.h"
#include "core/param_groups.h"
#include "engine/optim/multi_tensor.h"
#include "engine/optim/optim.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::engine::optim {
namespace {

std::unique_ptr<core::Optimizer> Make(const char* name, const google::protobuf::Message& options,
                                      const std::vector<core::ParamGroupSpec>& groups) {
  google::protobuf::Any any;
  any.PackFrom(options);
  auto made = core::OptimizerRegistry::Get().Create(name, any, core::OptimizerSpec{groups});
  EXPECT_TRUE(made.ok()) << made.status();
  return made.ok() ? std::move(made).value() : nullptr;
}

// One group holding one parameter p with gradient g.
std::vector<core::ParamGroupSpec> OneGroup(at::Tensor p, at::Tensor g, double lr, double wd) {
  p.mutable_grad() = g;
  core::ParamGroupSpec group;
  group.name = "all";
  group.params = {p};
  group.lr = lr;
  group.weight_decay = wd;
  return {group};
}

TEST(OptimizersTest, SgdMomentumWeightDecayFirstTwoSteps) {
  at::Tensor p = torch::tensor({1.0, 2.0}, torch::kFloat64).requires_grad_(true);
  auto opt = Make("SGD", SgdOptions(), OneGroup(p, torch::tensor({0.5, -1.0}, torch::kFloat64),
                                                /*lr=*/0.1, /*wd=*/0.01));
  opt->torch_optimizer().step();
  // d = g + wd * p = [0.51, -0.98]; buf = d; p -= lr * buf.
  EXPECT_NEAR(p[0].item<double>(), 1.0 - 0.1 * 0.51, 1e-12);
  EXPECT_NEAR(p[1].item<double>(), 2.0 + 0.1 * 0.98, 1e-12);
  // Second step, same gradient: d = g + wd * p1; buf = 0.9 * buf + d.
  const double p0 = 1.0 - 0.1 * 0.51;
  const double buf = 0.9 * 0.51 + (0.5 + 0.01 * p0);
  opt->torch_optimizer().step();
  EXPECT_NEAR(p[0].item<double>(), p0 - 0.1 * buf, 1e-12);
}

TEST(OptimizersTest, AdamFirstStepHandComputed) {
  at::Tensor p = torch::tensor({1.0}, torch::kFloat64).requires_grad_(true);
  auto opt = Make("Adam", AdamOptions(), OneGroup(p, torch::tensor({0.5}, torch::kFloat64), 0.1, 0));
  opt->torch_optimizer().step();
  // m_hat = g, v_hat = g^2 after bias correction: p -= lr * g / (|g| + eps).
  EXPECT_NEAR(p[0].item<double>(), 1.0 - 0.1 * 0.5 / (0.5 + 1e-8), 1e-12);
}

TEST(OptimizersTest, AdamWDecouplesWeightDecay) {
  at::Tensor p = torch::tensor({1.0}, torch::kFloat64).requires_grad_(true);
  auto opt = Make("AdamW", AdamOptions(), OneGroup(p, torch::tensor({0.5}, torch::kFloat64), 0.1, 0.1));
  opt->torch_optimizer().step();
  EXPECT_NEAR(p[0].item<double>(), 1.0 * (1 - 0.1 * 0.1) - 0.1 * 0.5 / (0.5 + 1e-8), 1e-12);
}

struct Net : torch::nn::Module {
  Net() {
    backbone = register_module("backbone", std::make_shared<torch::nn::Module>());
    backbone_fc = backbone->register_module("fc", torch::nn::Linear(3, 4));
    backbone_bn = backbone->register_module("bn", torch::nn::BatchNorm1d(4));
    head = register_module("head", torch::nn::Linear(4, 2));
  }
  std::shared_ptr<torch::nn::Module> backbone;
  torch::nn::Linear backbone_fc{nullptr};
  torch::nn::BatchNorm1d backbone_bn{nullptr};
  torch::nn::Linear head{nullptr};
};

TEST(ParamGroupsTest, SplitsDecayAndBackboneAsConfigured) {
  auto net = std::make_shared<Net>();
  core::OptimizerConfig config;
  config.set_weight_decay(1e-4);
  config.set_backbone_lr_multiplier(0.1);
  std::vector<core::ParamGroupSpec> groups = core::MakeParamGroups(*net, config, /*lr=*/0.5);
  ASSERT_EQ(groups.size(), 4u);
  EXPECT_EQ(groups[0].name, "decay");  // head.weight
  EXPECT_EQ(groups[0].params.size(), 1u);
  EXPECT_TRUE(groups[0].params[0].is_same(net->head->weight));
  EXPECT_DOUBLE_EQ(groups[0].lr, 0.5);
  EXPECT_DOUBLE_EQ(groups[0].weight_decay, 1e-4);
  EXPECT_EQ(groups[1].name, "no_decay");  // head.bias
  EXPECT_DOUBLE_EQ(groups[1].weight_decay, 0);
  EXPECT_EQ(groups[2].name, "backbone_decay");  // backbone.fc.weight
  EXPECT_EQ(groups[2].params.size(), 1u);
  EXPECT_DOUBLE_EQ(groups[2].lr, 0.05);
  EXPECT_EQ(groups[3].name, "backbone_no_decay");  // fc.bias, bn.weight, bn.bias
  EXPECT_EQ(groups[3].params.size(), 3u);
  EXPECT_DOUBLE_EQ(groups[3].weight_decay, 0);

  config.set_no_weight_decay_on_norm_and_bias(false);
  config.set_backbone_lr_multiplier(1.0);
  groups = core::MakeParamGroups(*net, config, 0.5);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].params.size(), 2u);
  EXPECT_EQ(groups[1].params.size(), 4u);
}

TEST(ParamGroupsTest, FrozenParametersAreLeftOut) {
  auto net = std::make_shared<Net>();
  net->backbone_fc->weight.set_requires_grad(false);
  core::OptimizerConfig config;
  int64_t total = 0;
  for (const auto& g : core::MakeParamGroups(*net, config, 0.1)) total += g.params.size();
  EXPECT_EQ(total, 5);
}

TEST(OptimizersTest, SetLrFactorScalesEachGroupFromItsBase) {
  auto net = std::make_shared<Net>();
  core::OptimizerConfig config;
  config.set_backbone_lr_multiplier(0.1);
  auto opt = Make("SGD", SgdOptions(), core::MakeParamGroups(*net, config, 1.0));
  opt->SetLrFactor(0.5);
  EXPECT_DOUBLE_EQ(opt->lr(0), 0.5);
  EXPECT_DOUBLE_EQ(opt->lr(2), 0.05);
  opt->SetLrFactor(0.25);
  EXPECT_DOUBLE_EQ(opt->lr(0), 0.25);
}

TEST(OptimizersTest, InvalidOptionsAreReported) {
  SgdOptions nesterov;
  nesterov.set_nesterov(true);
  nesterov.set_momentum(0);
  google::protobuf::Any any;
  any.PackFrom(nesterov);
  at::Tensor p = torch::zeros({1}).requires_grad_(true);
  auto made = core::OptimizerRegistry::Get().Create(
      "SGD", any, core::OptimizerSpec{OneGroup(p, torch::zeros({1}), 0.1, 0)});
  EXPECT_THAT(made.status().message(), ::testing::HasSubstr("optimizer.options.nesterov"));
  made = core::OptimizerRegistry::Get().Create("SGD", google::protobuf::Any(), {});
  EXPECT_THAT(made.status().message(), ::testing::HasSubstr("no trainable parameters"));
}

// ATen's _fused_sgd_ leaves float16/bfloat16 parameters unchanged on the CPU (torch 2.11):
// FUSED SGD is refused there when the optimizer is built, and allowed for float32, on CUDA
// (where the parameters go after the optimizer is built) and for Adam.
TEST(OptimizersTest, FusedSgdOnReducedPrecisionCpuParametersIsRefusedAtConstruction) {
  for (at::ScalarType dtype : {at::kHalf, at::kBFloat16}) {
    at::Tensor p = torch::zeros({2}, dtype).requires_grad_(true);
    core::OptimizerSpec spec{OneGroup(p, torch::zeros({2}, dtype), 0.1, 0),
                             core::OptimizerConfig::FUSED, c10::kCPU};
    google::protobuf::Any any;
    auto made = core::OptimizerRegistry::Get().Create("SGD", any, spec);
    EXPECT_EQ(made.status().code(), absl::StatusCode::kInvalidArgument) << made.status();
    EXPECT_THAT(made.status().message(),
                ::testing::AllOf(::testing::HasSubstr("optimizer.implementation: FUSED SGD"),
                                 ::testing::HasSubstr("use FOREACH or FOR_LOOP"),
                                 ::testing::HasSubstr("group 'all'")));
    spec.device_type = c10::kCUDA;
    EXPECT_TRUE(core::OptimizerRegistry::Get().Create("SGD", any, spec).ok())
        << "FUSED SGD for CUDA " << c10::toString(dtype) << " parameters was refused";
    spec.device_type = c10::kCPU;
    for (core::OptimizerConfig::Implementation other :
         {core::OptimizerConfig::AUTO, core::OptimizerConfig::FOR_LOOP,
          core::OptimizerConfig::FOREACH}) {
      spec.implementation = other;
      EXPECT_TRUE(core::OptimizerRegistry::Get().Create("SGD", any, spec).ok())
          << core::OptimizerConfig::Implementation_Name(other) << " was refused";
    }
    spec.implementation = core::OptimizerConfig::FUSED;
    EXPECT_TRUE(core::OptimizerRegistry::Get().Create("AdamW", any, spec).ok())
        << "FUSED AdamW for CPU " << c10::toString(dtype) << " parameters was refused";
  }
}

// The config's implementation reaches the optimizer the plugin builds.
TEST(OptimizersTest, ConfiguredImplementationSteps) {
  const std::pair<core::OptimizerConfig::Implementation, Implementation> cases[] = {
      {core::OptimizerConfig::AUTO, Implementation::kAuto},
      {core::OptimizerConfig::FOR_LOOP, Implementation::kForLoop},
      {core::OptimizerConfig::FOREACH, Implementation::kForeach},
      {core::OptimizerConfig::FUSED, Implementation::kFused}};
  for (const auto& [configured, expected] : cases) {
    at::Tensor p = torch::ones({2}).requires_grad_(true);
    google::protobuf::Any any;
    auto sgd = core::OptimizerRegistry::Get().Create(
        "SGD", any, core::OptimizerSpec{OneGroup(p, torch::ones({2}), 0.1, 0), configured});
    auto adamw = core::OptimizerRegistry::Get().Create(
        "AdamW", any, core::OptimizerSpec{OneGroup(p, torch::ones({2}), 0.1, 0), configured});
    ASSERT_TRUE(sgd.ok() && adamw.ok()) << sgd.status() << " " << adamw.status();
    auto* multi = dynamic_cast<MultiTensorSGD*>(&(*sgd)->torch_optimizer());
    ASSERT_NE(multi, nullptr) << "SGD is not a MultiTensorSGD";
    EXPECT_EQ(multi->implementation(), expected)
        << "expected " << ImplementationName(expected) << ", got "
        << ImplementationName(multi->implementation());
    auto* multi_adamw = dynamic_cast<MultiTensorAdamW*>(&(*adamw)->torch_optimizer());
    ASSERT_NE(multi_adamw, nullptr) << "AdamW is not a MultiTensorAdamW";
    EXPECT_EQ(multi_adamw->implementation(), expected);
  }
}

}  // namespace
}  // namespace vision::engine::optim
