#include "core/batch_norm.h"

#include <ATen/ATen.h>
#include <torch/nn/modules/batchnorm.h>

#include "gtest/gtest.h"

namespace vision::core {
namespace {

TEST(BatchNorm2dTest, MatchesTorchBatchNorm2dInTrainAndEval) {
  torch::manual_seed(0);
  BatchNorm2d ours(3);
  torch::nn::BatchNorm2d reference(3);
  {
    at::NoGradGuard no_grad;
    ours->weight.copy_(at::tensor({1.0f, 2.0f, 0.5f}));
    reference->weight.copy_(ours->weight);
  }
  const at::Tensor x = at::randn({4, 3, 5, 5});
  const at::Tensor a = x.clone().requires_grad_(true), b = x.clone().requires_grad_(true);
  ours->forward(a).pow(2).sum().backward();
  reference->forward(b).pow(2).sum().backward();
  EXPECT_TRUE(at::allclose(a.grad(), b.grad(), 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(ours->weight.grad(), reference->weight.grad(), 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(ours->running_mean, reference->running_mean));
  EXPECT_TRUE(at::allclose(ours->running_var, reference->running_var));
  EXPECT_EQ(ours->num_batches_tracked.item<int64_t>(), 1);
  ours->eval();
  reference->eval();
  EXPECT_TRUE(at::allclose(ours->forward(x), reference->forward(x), 1e-5, 1e-6));
}

TEST(BatchNorm2dTest, KeepsTorchvisionNames) {
  BatchNorm2d bn(2);
  std::vector<std::string> names;
  for (const auto& p : bn->named_parameters()) names.push_back(p.key());
  for (const auto& b : bn->named_buffers()) names.push_back(b.key());
  EXPECT_EQ(names, (std::vector<std::string>{"weight", "bias", "running_mean", "running_var",
                                             "num_batches_tracked"}));
}

class DoubleInput : public BatchNormSync {
 public:
  at::Tensor Forward(const at::Tensor& input, const at::Tensor&, const at::Tensor&, at::Tensor&,
                     at::Tensor&, double, double) override {
    ++calls;
    return input * 2;
  }
  int calls = 0;
};

TEST(BatchNorm2dTest, UsesTheSynchroniserOnlyInTraining) {
  BatchNorm2d bn(1);
  auto sync = std::make_shared<DoubleInput>();
  bn->SetSync(sync);
  const at::Tensor x = at::ones({1, 1, 2, 2});
  EXPECT_TRUE(at::equal(bn->forward(x), x * 2));
  bn->eval();
  EXPECT_TRUE(at::allclose(bn->forward(x), x / std::sqrt(1 + 1e-5)));
  EXPECT_EQ(sync->calls, 1);
}

}  // namespace
}  // namespace vision::core
