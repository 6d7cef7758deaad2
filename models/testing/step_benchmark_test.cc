// SyncSite: the call sites the GPU check names for each host-device synchronisation, from
// backtraces shaped like c10::get_backtrace's and from a real one (this test is linked with
// -rdynamic, as the benchmarks are, so that our frames have names).
#include "models/testing/step_benchmark.h"

#include <c10/util/Backtrace.h>

#include <string>

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

}  // namespace
}  // namespace vision::models::testing
