#include "core/activation_checkpoint.h"

#include <ATen/ATen.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>

#include "core/batch_norm.h"
#include "gtest/gtest.h"

namespace vision::core {
namespace {

torch::nn::Sequential MakeBlock() {
  return torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 4, 3).padding(1)),
                               BatchNorm2d(4), torch::nn::ReLU(), torch::nn::Dropout(0.3),
                               torch::nn::Conv2d(4, 2, 1));
}

struct Outcome {
  at::Tensor output, input_grad;
  std::vector<at::Tensor> param_grads, buffers;
};

Outcome Train(bool checkpoint, bool input_requires_grad) {
  torch::manual_seed(1);
  torch::nn::Sequential block = MakeBlock();
  torch::nn::Conv2d after(2, 1, 1);
  const at::Tensor x = at::randn({2, 3, 6, 6}).requires_grad_(input_requires_grad);
  torch::manual_seed(9);  // the dropout mask
  at::Tensor y = checkpoint ? CheckpointedForward(block.ptr(), [&](const at::Tensor& t) { return block->forward(t); }, x)
                            : block->forward(x);
  at::Tensor out = after->forward(y);
  out.pow(2).sum().backward();
  Outcome run;
  run.output = out.detach();
  run.input_grad = input_requires_grad ? x.grad() : at::Tensor();
  for (const at::Tensor& p : block->parameters()) run.param_grads.push_back(p.grad());
  run.param_grads.push_back(after->weight.grad());
  for (const at::Tensor& b : block->buffers()) run.buffers.push_back(b.clone());
  return run;
}

TEST(ActivationCheckpointTest, GradientsOutputsAndStatisticsEqualThePlainRun) {
  for (bool input_requires_grad : {true, false}) {
    const Outcome plain = Train(false, input_requires_grad);
    const Outcome checkpointed = Train(true, input_requires_grad);
    EXPECT_TRUE(at::equal(plain.output, checkpointed.output));
    if (input_requires_grad) {
      EXPECT_TRUE(at::allclose(plain.input_grad, checkpointed.input_grad));
    }
    ASSERT_EQ(plain.param_grads.size(), checkpointed.param_grads.size());
    for (size_t i = 0; i < plain.param_grads.size(); ++i) {
      ASSERT_TRUE(checkpointed.param_grads[i].defined()) << i;
      EXPECT_TRUE(at::allclose(plain.param_grads[i], checkpointed.param_grads[i], 1e-6, 1e-7)) << i;
    }
    // Running statistics updated once, num_batches_tracked counted once.
    for (size_t i = 0; i < plain.buffers.size(); ++i) {
      EXPECT_TRUE(at::equal(plain.buffers[i], checkpointed.buffers[i])) << i;
    }
  }
}

TEST(ActivationCheckpointTest, EvalModeRunsThePlainForward) {
  torch::nn::Sequential block = MakeBlock();
  block->eval();
  const at::Tensor x = at::randn({1, 3, 4, 4});
  EXPECT_TRUE(at::equal(
      CheckpointedForward(block.ptr(), [&](const at::Tensor& t) { return block->forward(t); }, x),
      block->forward(x)));
}

}  // namespace
}  // namespace vision::core
