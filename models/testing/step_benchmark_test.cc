// SyncSite: the call sites the GPU check names for each host-device synchronisation, from
// backtraces shaped like c10::get_backtrace's and from a real one (this test is linked with
// -rdynamic, as the benchmarks are, so that our frames have names). The CUDA-graph check's
// comparison (CheckReplayAgainstEager) against replays that are right and wrong, on the CPU.
#include "models/testing/step_benchmark.h"

#include <c10/util/Backtrace.h>

#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include "engine/loss_scaler.h"
#include "engine/optimizer_step.h"
#include "gtest/gtest.h"

namespace vision::probe {
// Not inlined: its frame must be on the stack.
__attribute__((noinline)) std::string BacktraceHere() {
  std::string trace = c10::get_backtrace();
  asm volatile("" ::: "memory");
  return trace;
}
}  // namespace vision::probe

namespace vision::models::testing {
namespace {

TEST(SyncSiteTest, NamesTheOperatorOurCodeCalledAndWhere) {
  const std::string trace =
      "frame #0: c10::cuda::warn_or_error_on_sync() + 0x12 (0x7f01 in libc10_cuda.so)\n"
      "frame #1: at::native::_local_scalar_dense_cuda(at::Tensor const&) + 0x55 (0x7f02 in "
      "libtorch_cuda.so)\n"
      "frame #2: at::_ops::_local_scalar_dense::call(at::Tensor const&) + 0x1 (0x7f03 in "
      "libtorch_cpu.so)\n"
      "frame #3: at::native::item(at::Tensor const&) + 0x1 (0x7f04 in libtorch_cpu.so)\n"
      "frame #4: at::_ops::item::call(at::Tensor const&) + 0x1 (0x7f05 in libtorch_cpu.so)\n"
      "frame #5: vision::engine::LossScaler::UnscaleAndCheckFinite(std::vector<at::Tensor, "
      "std::allocator<at::Tensor> > const&) + 0x99 (0x5501 in activation_memory_benchmark)\n"
      "frame #6: vision::models::dbnet::(anonymous namespace)::Run()::{lambda(vision::models::"
      "testing::PhaseTimer*)#1}::operator()(vision::models::testing::PhaseTimer*) const + 0x1 "
      "(0x5502 in activation_memory_benchmark)\n";
  EXPECT_EQ(SyncSite(trace), "item in vision::engine::LossScaler::UnscaleAndCheckFinite");
}

TEST(SyncSiteTest, TheBenchmarksOwnStepCodeIsNotTheSite) {
  const std::string trace =
      "frame #0: c10::cuda::warn_or_error_on_sync() + 0x12 (0x7f01 in libc10_cuda.so)\n"
      "frame #1: at::_ops::nonzero::call(at::Tensor const&) + 0x1 (0x7f03 in libtorch_cpu.so)\n"
      "frame #2: vision::models::testing::ReportSteps(c10::Device const&) + 0x5 (0x5501 in b)\n"
      "frame #3: <unknown function> + 0x47219 (0x5502 in b)\n";
  EXPECT_EQ(SyncSite(trace), "nonzero");
}

TEST(SyncSiteTest, WarningsReplayedAfterBackwardSayBackward) {
  const std::string trace =
      "frame #0: c10::cuda::warn_or_error_on_sync() + 0x12 (0x7f01 in libc10_cuda.so)\n"
      "frame #1: c10::WarningUtils::... + 0x1 (0x7f02 in libc10.so)\n"
      "frame #2: torch::autograd::Engine::execute(...) + 0x1 (0x7f03 in libtorch_cpu.so)\n"
      "frame #3: 0x7f04 (0x7f04 in libtorch_cpu.so)\n";
  EXPECT_EQ(SyncSite(trace), "backward (autograd's replayed warning)");
}

TEST(SyncSiteTest, ARealBacktraceNamesOurFrame) {
  const std::string trace = vision::probe::BacktraceHere();
  EXPECT_EQ(SyncSite(trace), "(no operator) in vision::probe::BacktraceHere") << trace;
}

// A small network with a BatchNorm (a buffer the step changes), the trainer's FUSED SGD with
// momentum (skips on the device, so a captured step could run it) and a fixed batch.
class ReplayCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    torch::manual_seed(5);
    model_ = torch::nn::Sequential(torch::nn::Linear(6, 8), torch::nn::BatchNorm1d(8),
                                   torch::nn::Linear(8, 1));
    auto sgd = MakeSgd(*model_, 0.1, 0.9, 1e-4, "fused", c10::kCPU);
    ASSERT_TRUE(sgd.ok()) << sgd.status();
    optimizer_ = std::move(sgd).value();
    ASSERT_TRUE(optimizer_->SkipsOnDevice());
    x_ = at::randn({16, 6});
    y_ = at::randn({16, 1});
    step_();  // momentum buffers exist, as after the warm-up steps
    optimizer_->torch_optimizer().zero_grad();
  }

  // What the benchmarks capture: forward with the loss, backward, the optimizer phase.
  std::function<at::Tensor()> step_ = [this] {
    const at::Tensor loss = (model_->forward(x_) - y_).pow(2).mean();
    loss.backward();
    engine::RunOptimizerPhase(model_->parameters(), scaler_, *optimizer_, {});
    return loss.detach();
  };
  absl::StatusOr<std::string> Check(const std::function<at::Tensor()>& replay) {
    return CheckReplayAgainstEager(replay, step_, *optimizer_, model_->parameters(),
                                   TrainingStateTensors(*model_, *optimizer_), 1e-2);
  }

  torch::nn::Sequential model_{nullptr};
  std::unique_ptr<core::Optimizer> optimizer_;
  engine::LossScaler scaler_{engine::LossScalerOptions{}};
  at::Tensor x_, y_;
};

TEST_F(ReplayCheckTest, StateHoldsParametersBuffersAndMomentum) {
  // 6 parameters, BatchNorm's 3 buffers, a momentum buffer per parameter.
  EXPECT_EQ(TrainingStateTensors(*model_, *optimizer_).size(), 6u + 3u + 6u);
}

TEST_F(ReplayCheckTest, AReplayThatRedoesTheStepPasses) {
  // A graph's replay writes the gradients anew: here, zero them and run the same step.
  const absl::StatusOr<std::string> line = Check([this] {
    optimizer_->torch_optimizer().zero_grad(/*set_to_none=*/false);
    return step_();
  });
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_NE(line->find("difference 0 of its norm"), std::string::npos) << *line;
}

TEST_F(ReplayCheckTest, AReplayThatMissesOrRepeatsWorkFails) {
  // No optimizer update (stale or missing work): the update differs by all of it.
  absl::StatusOr<std::string> line =
      Check([this] { return (model_->forward(x_) - y_).pow(2).mean().detach(); });
  EXPECT_FALSE(line.ok());
  EXPECT_NE(std::string(line.status().message()).find("difference 1 of its norm"),
            std::string::npos)
      << line.status();
  // Gradients accumulated onto the last step's instead of written anew.
  line = Check(step_);
  EXPECT_FALSE(line.ok()) << *line;
}

}  // namespace
}  // namespace vision::models::testing
