// FOREACH and FUSED against FOR_LOOP (LibTorch's torch::optim step, today's path): the same
// parameters, gradients and learning rates, six steps, parameters and state compared.
//
// Tolerances are in float32 units in the last place (ulps, 2^-23 relative) of the largest
// magnitude of the tensor compared. Each is about 4x the largest difference seen on these
// cases (in brackets), and far below what a skipped or doubled update would leave (thousands):
//  - SGD FOREACH: 0, bitwise. It runs the loop's operators in the loop's order; on the CPU
//    _foreach_* loops over the same kernels.
//  - SGD FUSED: kFusedSgdUlps (0.85). One expression per element (g + wd*p, the buffer,
//    Nesterov, the update) where the loop rounds a whole tensor after each operator.
//  - Adam/AdamW FOREACH: kForeachAdamUlps (2.0). torch.optim's _multi_tensor_adam updates
//    exp_avg with lerp(grad, 1 - beta1) instead of mul(beta1) + add((1 - beta1) * grad), about
//    one ulp of exp_avg per step, which the update divides by sqrt(exp_avg_sq) (of the order
//    of |grad| here, so it is not amplified) and carries into the parameters.
//  - Adam/AdamW FUSED: kFusedAdamUlps (2.0). As FOREACH, plus the fused kernel's order and
//    its float32 copy of the step count in the bias corrections.
// Step counts are compared exactly. Everything runs in float32 unless said otherwise.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <ATen/Context.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>
#include <torch/cuda.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include "engine/optim/multi_tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::engine::optim {
namespace {

using torch::optim::OptimizerParamGroup;

constexpr double kFusedSgdUlps = 4;
constexpr double kForeachAdamUlps = 8;
constexpr double kFusedAdamUlps = 8;
// CUDA against the CPU, and FOREACH/FUSED against FOR_LOOP on CUDA: the CUDA kernels may
// contract a * b + c into fused multiply-adds and are other code than the CPU's, so even SGD
// FOREACH need not be bitwise there. Not yet measured on a GPU: a generous bound that still
// fails an update that was skipped or applied twice (thousands of ulps).
constexpr double kCudaUlps = 64;

constexpr int kSteps = 6;
// Learning-rate factor per step, as a schedule would set it on every group.
constexpr double kLrFactor[kSteps] = {1.0, 0.5, 0.8, 0.3, 1.2, 0.7};
constexpr double kLr[2] = {0.1, 0.03};
// Parameters 0-2 are group 0, 3-4 group 1. Parameter 2 never has a gradient; parameter 4
// gets one from step kLateGradStep on (its state starts beside others that exist already).
const std::vector<std::vector<int64_t>> kShapes = {{4, 3}, {2, 3, 3, 3}, {6}, {5}, {3, 2}};
constexpr size_t kNoGrad = 2;
constexpr size_t kLateGrad = 4;
constexpr int kLateGradStep = 2;

struct Scenario {
  std::string name;
  Algorithm algorithm = Algorithm::kSgd;
  double momentum = 0, dampening = 0;
  bool nesterov = false;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  bool amsgrad = false;
  // Group 0's; group 1 has none (the trainer's no-decay group).
  double weight_decay = 0;
};

std::unique_ptr<torch::optim::OptimizerOptions> Options(const Scenario& s, double lr,
                                                        double weight_decay) {
  switch (s.algorithm) {
    case Algorithm::kSgd:
      return std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(lr)
                                                            .momentum(s.momentum)
                                                            .dampening(s.dampening)
                                                            .nesterov(s.nesterov)
                                                            .weight_decay(weight_decay));
    case Algorithm::kAdam:
      return std::make_unique<torch::optim::AdamOptions>(torch::optim::AdamOptions(lr)
                                                             .betas({s.beta1, s.beta2})
                                                             .eps(s.eps)
                                                             .amsgrad(s.amsgrad)
                                                             .weight_decay(weight_decay));
    case Algorithm::kAdamW:
      return std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(lr)
                                                              .betas({s.beta1, s.beta2})
                                                              .eps(s.eps)
                                                              .amsgrad(s.amsgrad)
                                                              .weight_decay(weight_decay));
  }
  return nullptr;
}

std::vector<OptimizerParamGroup> Groups(const Scenario& s, const std::vector<at::Tensor>& p) {
  std::vector<OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<at::Tensor>{p[0], p[1], p[2]},
                      Options(s, kLr[0], s.weight_decay));
  groups.emplace_back(std::vector<at::Tensor>{p[3], p[4]}, Options(s, kLr[1], 0));
  return groups;
}

// Ours with `implementation`, or (plain) LibTorch's own class, as checkpoints were written.
std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const Scenario& s,
                                                       const std::vector<at::Tensor>& params,
                                                       Implementation implementation,
                                                       bool plain = false) {
  std::vector<OptimizerParamGroup> groups = Groups(s, params);
  switch (s.algorithm) {
    case Algorithm::kSgd:
      if (plain) return std::make_unique<torch::optim::SGD>(groups, torch::optim::SGDOptions(1));
      return std::make_unique<MultiTensorSGD>(groups, torch::optim::SGDOptions(1), implementation);
    case Algorithm::kAdam:
      if (plain) return std::make_unique<torch::optim::Adam>(groups);
      return std::make_unique<MultiTensorAdam>(groups, torch::optim::AdamOptions(), implementation);
    case Algorithm::kAdamW:
      if (plain) return std::make_unique<torch::optim::AdamW>(groups);
      return std::make_unique<MultiTensorAdamW>(groups, torch::optim::AdamWOptions(),
                                                implementation);
  }
  return nullptr;
}

// A parameter's state by name; "step" as a 0-dim int64 tensor. Empty when it has none.
std::map<std::string, at::Tensor> StateOf(torch::optim::Optimizer& optimizer, Algorithm algorithm,
                                          const at::Tensor& p) {
  auto it = optimizer.state().find(p.unsafeGetTensorImpl());
  if (it == optimizer.state().end()) return {};
  std::map<std::string, at::Tensor> state;
  auto adam = [&](const auto& s) {
    state["step"] = at::scalar_tensor(s.step(), at::kLong);
    state["exp_avg"] = s.exp_avg();
    state["exp_avg_sq"] = s.exp_avg_sq();
    if (s.max_exp_avg_sq().defined()) state["max_exp_avg_sq"] = s.max_exp_avg_sq();
  };
  switch (algorithm) {
    case Algorithm::kSgd:
      state["momentum_buffer"] =
          static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer();
      break;
    case Algorithm::kAdam:
      adam(static_cast<torch::optim::AdamParamState&>(*it->second));
      break;
    case Algorithm::kAdamW:
      adam(static_cast<torch::optim::AdamWParamState&>(*it->second));
      break;
  }
  return state;
}

struct Result {
  std::vector<at::Tensor> params;
  std::vector<std::map<std::string, at::Tensor>> state;
};

Result Snapshot(torch::optim::Optimizer& optimizer, Algorithm algorithm,
                const std::vector<at::Tensor>& params) {
  Result result;
  for (const at::Tensor& p : params) {
    result.params.push_back(p.detach().to(at::kCPU).clone());
    std::map<std::string, at::Tensor> state;
    for (const auto& [name, t] : StateOf(optimizer, algorithm, p)) {
      state[name] = t.to(at::kCPU).clone();
    }
    result.state.push_back(std::move(state));
  }
  return result;
}

// The same seeded initial values and gradients for every run.
struct Problem {
  std::vector<at::Tensor> initial;
  std::vector<std::vector<at::Tensor>> grads;  // [step][param], undefined: no gradient
};

Problem MakeProblem(uint64_t seed = 7) {
  at::manual_seed(seed);
  Problem problem;
  for (const auto& shape : kShapes) problem.initial.push_back(at::randn(shape));
  for (int s = 0; s < kSteps; ++s) {
    std::vector<at::Tensor> grads;
    for (size_t i = 0; i < kShapes.size(); ++i) {
      const bool has_grad = i != kNoGrad && (i != kLateGrad || s >= kLateGradStep);
      grads.push_back(has_grad ? at::randn(kShapes[i]) : at::Tensor());
    }
    problem.grads.push_back(std::move(grads));
  }
  return problem;
}

std::vector<at::Tensor> Parameters(const Problem& problem, const at::TensorOptions& options) {
  std::vector<at::Tensor> params;
  for (const at::Tensor& t : problem.initial) {
    params.push_back(t.to(options, /*non_blocking=*/false, /*copy=*/true).requires_grad_(true));
  }
  return params;
}

// Steps [first, last) of `problem`; checks that no step changes a gradient.
void Steps(const Problem& problem, torch::optim::Optimizer& optimizer,
           const std::vector<at::Tensor>& params, int first, int last, const std::string& label) {
  for (int s = first; s < last; ++s) {
    std::vector<at::Tensor> given;
    for (size_t i = 0; i < params.size(); ++i) {
      const at::Tensor& g = problem.grads[s][i];
      params[i].mutable_grad() =
          g.defined() ? g.to(params[i].options(), /*non_blocking=*/false, /*copy=*/true)
                      : at::Tensor();
      given.push_back(g.defined() ? params[i].grad().clone() : at::Tensor());
    }
    for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
      optimizer.param_groups()[g].options().set_lr(kLr[g] * kLrFactor[s]);
    }
    optimizer.step();
    for (size_t i = 0; i < params.size(); ++i) {
      if (!given[i].defined()) continue;
      EXPECT_TRUE(at::equal(params[i].grad(), given[i]))
          << label << ": step " << s << " changed the gradient of parameter " << i;
    }
  }
}

Result RunSteps(const Scenario& s, Implementation implementation, const Problem& problem,
                const at::TensorOptions& options = at::kFloat) {
  std::vector<at::Tensor> params = Parameters(problem, options);
  std::unique_ptr<torch::optim::Optimizer> optimizer = MakeOptimizer(s, params, implementation);
  const std::string label = s.name + " " + ImplementationName(implementation);
  Steps(problem, *optimizer, params, 0, kSteps, label);
  return Snapshot(*optimizer, s.algorithm, params);
}

// Expects `actual` within `ulps` float32 ulps of the largest magnitude in `expected`
// (0: bitwise), saying where and by how much it is not.
void ExpectClose(const at::Tensor& expected, const at::Tensor& actual, double ulps,
                 const std::string& what) {
  ASSERT_EQ(expected.sizes(), actual.sizes()) << what;
  ASSERT_EQ(expected.scalar_type(), actual.scalar_type()) << what;
  if (ulps == 0) {
    if (at::equal(expected, actual)) return;
  }
  const at::Tensor e = expected.to(at::kDouble), a = actual.to(at::kDouble);
  const double scale = std::max(e.abs().max().item<double>(), 1e-30);
  const at::Tensor diff = (e - a).abs().flatten();
  const int64_t worst = diff.argmax().item<int64_t>();
  const double max_diff = diff[worst].item<double>();
  const double seen_ulps = max_diff / (scale * std::ldexp(1.0, -23));
  EXPECT_LE(max_diff, ulps * scale * std::ldexp(1.0, -23))
      << what << ": expected within " << ulps << " ulps of " << scale << " ("
      << (ulps == 0 ? "bitwise" : "float32") << "), saw " << seen_ulps << " ulps: element " << worst
      << " expected " << e.flatten()[worst].item<double>() << ", saw "
      << a.flatten()[worst].item<double>();
}

void ExpectSame(const Result& expected, const Result& actual, double ulps,
                const std::string& label) {
  ASSERT_EQ(expected.params.size(), actual.params.size());
  for (size_t i = 0; i < expected.params.size(); ++i) {
    const std::string param = label + ", parameter " + std::to_string(i);
    ExpectClose(expected.params[i], actual.params[i], ulps, param);
    std::vector<std::string> expected_names, actual_names;
    for (const auto& [name, t] : expected.state[i]) expected_names.push_back(name);
    for (const auto& [name, t] : actual.state[i]) actual_names.push_back(name);
    ASSERT_EQ(expected_names, actual_names) << param << ": state entries differ";
    for (const auto& [name, t] : expected.state[i]) {
      ExpectClose(t, actual.state[i].at(name), name == "step" ? 0 : ulps, param + " " + name);
    }
  }
}

std::vector<Scenario> SgdScenarios() {
  std::vector<Scenario> cases(6);
  cases[0].name = "SGD plain";
  cases[1].name = "SGD weight decay";
  cases[1].weight_decay = 1e-2;
  cases[2].name = "SGD momentum 0.9";
  cases[2].momentum = 0.9;
  cases[3].name = "SGD momentum 0.9 dampening 0.3 weight decay";
  cases[3].momentum = 0.9;
  cases[3].dampening = 0.3;
  cases[3].weight_decay = 1e-2;
  cases[4].name = "SGD Nesterov";
  cases[4].momentum = 0.9;
  cases[4].nesterov = true;
  cases[5].name = "SGD Nesterov weight decay";
  cases[5].momentum = 0.9;
  cases[5].nesterov = true;
  cases[5].weight_decay = 1e-2;
  return cases;
}

std::vector<Scenario> AdamScenarios(Algorithm algorithm) {
  std::vector<Scenario> cases;
  for (bool amsgrad : {false, true}) {
    for (double weight_decay : {0.0, 5e-2}) {
      Scenario s;
      s.algorithm = algorithm;
      s.name = std::string(algorithm == Algorithm::kAdam ? "Adam" : "AdamW") +
               (amsgrad ? " amsgrad" : "") + (weight_decay != 0 ? " weight decay" : "");
      s.amsgrad = amsgrad;
      s.weight_decay = weight_decay;
      cases.push_back(s);
    }
  }
  return cases;
}

// Every case against FOR_LOOP: parameters (including the one without a gradient, which
// must stay as it was with no state) and state.
void ExpectMatchesForLoop(const std::vector<Scenario>& cases, Implementation implementation,
                          double ulps, const at::TensorOptions& options = at::kFloat) {
  const Problem problem = MakeProblem();
  for (const Scenario& s : cases) {
    const Result loop = RunSteps(s, Implementation::kForLoop, problem, options);
    ASSERT_TRUE(at::equal(loop.params[kNoGrad], problem.initial[kNoGrad].to(options.dtype())))
        << s.name << ": a parameter without a gradient changed";
    ASSERT_TRUE(loop.state[kNoGrad].empty()) << s.name << ": a parameter without a gradient "
                                             << "has state";
    ExpectSame(loop, RunSteps(s, implementation, problem, options), ulps,
               s.name + " " + ImplementationName(implementation) + " vs FOR_LOOP");
  }
}

TEST(MultiTensorTest, SgdForeachEqualsForLoopBitwise) {
  ExpectMatchesForLoop(SgdScenarios(), Implementation::kForeach, 0);
}

TEST(MultiTensorTest, SgdFusedEqualsForLoop) {
  ExpectMatchesForLoop(SgdScenarios(), Implementation::kFused, kFusedSgdUlps);
}

TEST(MultiTensorTest, AdamForeachEqualsForLoop) {
  ExpectMatchesForLoop(AdamScenarios(Algorithm::kAdam), Implementation::kForeach, kForeachAdamUlps);
}

TEST(MultiTensorTest, AdamFusedEqualsForLoop) {
  ExpectMatchesForLoop(AdamScenarios(Algorithm::kAdam), Implementation::kFused, kFusedAdamUlps);
}

TEST(MultiTensorTest, AdamWForeachEqualsForLoop) {
  ExpectMatchesForLoop(AdamScenarios(Algorithm::kAdamW), Implementation::kForeach,
                       kForeachAdamUlps);
}

TEST(MultiTensorTest, AdamWFusedEqualsForLoop) {
  ExpectMatchesForLoop(AdamScenarios(Algorithm::kAdamW), Implementation::kFused, kFusedAdamUlps);
}

// AUTO is FOR_LOOP when the parameters are on the CPU (PyTorch's default there).
TEST(MultiTensorTest, AutoIsForLoopOnTheCpu) {
  const Problem problem = MakeProblem();
  std::vector<at::Tensor> params = Parameters(problem, at::kFloat);
  EXPECT_EQ(Resolve(Implementation::kAuto, Algorithm::kSgd, Groups(SgdScenarios()[2], params)),
            Implementation::kForLoop);
  for (const Scenario& s : {SgdScenarios()[4], AdamScenarios(Algorithm::kAdamW)[3]}) {
    ExpectSame(RunSteps(s, Implementation::kForLoop, problem),
               RunSteps(s, Implementation::kAuto, problem), 0, s.name + " AUTO vs FOR_LOOP");
  }
}

// StepUnless with the flag set leaves parameters and state exactly as they were; with it clear
// it is step(). Against the loop that steps only on the unflagged steps, for the SGD cases
// without dampening, with the first step skipped (the momentum buffers start at zero then:
// see FusedSgd) and a later one. The flag is read on the device only: nothing here can show
// that, dbnet_cuda_test's synchronisation count of a trainer step does.
TEST(MultiTensorTest, SgdStepUnlessSkipsFlaggedSteps) {
  const Problem problem = MakeProblem();
  const std::vector<bool> skipped = {true, false, false, true, false, false};
  for (const Scenario& s : SgdScenarios()) {
    if (s.dampening != 0) continue;
    std::vector<at::Tensor> loop_params = Parameters(problem, at::kFloat);
    std::vector<at::Tensor> params = Parameters(problem, at::kFloat);
    std::unique_ptr<torch::optim::Optimizer> loop =
        MakeOptimizer(s, loop_params, Implementation::kForLoop);
    std::unique_ptr<torch::optim::Optimizer> fused =
        MakeOptimizer(s, params, Implementation::kFused);
    auto& sgd = static_cast<MultiTensorSGD&>(*fused);
    ASSERT_TRUE(sgd.SkipsOnDevice()) << s.name;
    for (int step = 0; step < kSteps; ++step) {
      for (size_t g = 0; g < 2; ++g) {
        loop->param_groups()[g].options().set_lr(kLr[g] * kLrFactor[step]);
        fused->param_groups()[g].options().set_lr(kLr[g] * kLrFactor[step]);
      }
      for (size_t i = 0; i < params.size(); ++i) {
        const at::Tensor& g = problem.grads[step][i];
        loop_params[i].mutable_grad() = g.defined() ? g.clone() : at::Tensor();
        params[i].mutable_grad() = g.defined() ? g.clone() : at::Tensor();
      }
      const Result before = Snapshot(*fused, s.algorithm, params);
      sgd.StepUnless(at::full({}, skipped[step] ? 1.0f : 0.0f));
      const std::string label = s.name + " step " + std::to_string(step);
      if (skipped[step]) {
        // Bitwise: a skipped step changes nothing but the zero buffers a first step creates.
        for (size_t i = 0; i < params.size(); ++i) {
          EXPECT_TRUE(at::equal(before.params[i], params[i].detach())) << label << " param " << i;
        }
        continue;
      }
      loop->step();
      ExpectSame(Snapshot(*loop, s.algorithm, loop_params), Snapshot(*fused, s.algorithm, params),
                 kFusedSgdUlps, label + " StepUnless vs FOR_LOOP");
    }
  }
}

TEST(MultiTensorTest, StepUnlessNeedsFusedWithoutDampening) {
  const Problem problem = MakeProblem();
  std::vector<at::Tensor> params = Parameters(problem, at::kFloat);
  for (Implementation implementation : {Implementation::kForLoop, Implementation::kForeach}) {
    MultiTensorSGD sgd(Groups(SgdScenarios()[2], params), torch::optim::SGDOptions(1),
                       implementation);
    EXPECT_FALSE(sgd.SkipsOnDevice()) << ImplementationName(implementation);
    EXPECT_THROW(sgd.StepUnless(at::zeros({})), c10::Error);
  }
  MultiTensorSGD damped(Groups(SgdScenarios()[3], params), torch::optim::SGDOptions(1),
                        Implementation::kFused);
  EXPECT_FALSE(damped.SkipsOnDevice());
  MultiTensorSGD fused(Groups(SgdScenarios()[2], params), torch::optim::SGDOptions(1),
                       Implementation::kFused);
  EXPECT_TRUE(fused.SkipsOnDevice());
  EXPECT_THROW(fused.StepUnless(at::zeros({1})), c10::Error);  // not 0-dim
}

// float64 parameters take the same paths (the foreach and fused kernels dispatch on dtype).
TEST(MultiTensorTest, Float64EqualsForLoop) {
  ExpectMatchesForLoop({SgdScenarios()[5]}, Implementation::kForeach, 0, at::kDouble);
  ExpectMatchesForLoop({SgdScenarios()[5]}, Implementation::kFused, kFusedSgdUlps, at::kDouble);
  ExpectMatchesForLoop({AdamScenarios(Algorithm::kAdamW)[3]}, Implementation::kFused,
                       kFusedAdamUlps, at::kDouble);
}

// step(closure) evaluates the closure with gradients enabled and returns its loss, as
// torch::optim does.
TEST(MultiTensorTest, StepReturnsTheClosuresLoss) {
  for (Implementation implementation : {Implementation::kForeach, Implementation::kFused}) {
    at::Tensor p = at::ones({3}).requires_grad_(true);
    MultiTensorSGD sgd({OptimizerParamGroup({p})}, torch::optim::SGDOptions(0.5), implementation);
    const at::Tensor loss = sgd.step([&] {
      at::Tensor l = (p * p).sum();
      l.backward();
      return l;
    });
    EXPECT_EQ(loss.item<double>(), 3.0) << ImplementationName(implementation);
    // p - 0.5 * 2p = 0.
    EXPECT_TRUE(at::equal(p.detach(), at::zeros({3})))
        << ImplementationName(implementation) << ": saw " << p;
  }
}

// What the plugin refuses at construction is refused by step() too, should the parameters
// reach such a device and dtype later.
TEST(MultiTensorTest, FusedSgdRefusesReducedPrecisionCpuParametersWhenStepping) {
  at::Tensor p = at::ones({3}, at::kBFloat16).requires_grad_(true);
  p.mutable_grad() = at::ones({3}, at::kBFloat16);
  MultiTensorSGD sgd({OptimizerParamGroup({p})}, torch::optim::SGDOptions(0.5),
                     Implementation::kFused);
  try {
    sgd.step();
    FAIL() << "FUSED SGD stepped bfloat16 CPU parameters";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("optimizer.implementation: FUSED SGD leaves "
                                               "bfloat16 parameters on the CPU unchanged"));
  }
  EXPECT_EQ(UnsupportedReason(Algorithm::kSgd, Implementation::kFused, c10::kCUDA, c10::kBFloat16),
            "");
  EXPECT_EQ(UnsupportedReason(Algorithm::kAdamW, Implementation::kFused, c10::kCPU, c10::kBFloat16),
            "");
  EXPECT_EQ(UnsupportedReason(Algorithm::kSgd, Implementation::kForeach, c10::kCPU, c10::kHalf),
            "");
}

// bfloat16 ulps (2^-7 relative) in float32 ulps.
constexpr double kBFloat16Ulps = 1 << 16;

// bfloat16 parameters: FOREACH SGD runs the loop's operators (bitwise); FUSED AdamW computes
// in float32 and rounds once where the loop rounds to bfloat16 after each operator, so it is
// within 4 bfloat16 ulps of the loop (1.4 seen).
TEST(MultiTensorTest, BFloat16Parameters) {
  ExpectMatchesForLoop({SgdScenarios()[3]}, Implementation::kForeach, 0, at::kBFloat16);
  ExpectMatchesForLoop({AdamScenarios(Algorithm::kAdamW)[1]}, Implementation::kFused,
                       4 * kBFloat16Ulps, at::kBFloat16);
}

// A checkpoint holds torch::optim's state whichever implementation wrote it: LibTorch's own
// class reads it back bit for bit, another implementation resumes from it, and resuming with
// the same implementation gives the uninterrupted run's bits.
TEST(MultiTensorTest, CheckpointsResumeAcrossImplementations) {
  const Problem problem = MakeProblem();
  constexpr int kSaveAfter = 3;
  const std::vector<Scenario> cases = {SgdScenarios()[5], AdamScenarios(Algorithm::kAdam)[3],
                                       AdamScenarios(Algorithm::kAdamW)[3]};
  const std::vector<std::pair<Implementation, Implementation>> pairs = {
      {Implementation::kForLoop, Implementation::kForeach},
      {Implementation::kForeach, Implementation::kFused},
      {Implementation::kFused, Implementation::kForLoop},
      {Implementation::kFused, Implementation::kFused},
      {Implementation::kForeach, Implementation::kForeach}};
  for (const Scenario& s : cases) {
    for (const auto& [writer, reader] : pairs) {
      const std::string label = s.name + ", written by " + ImplementationName(writer) +
                                ", resumed by " + ImplementationName(reader);
      std::vector<at::Tensor> params = Parameters(problem, at::kFloat);
      std::unique_ptr<torch::optim::Optimizer> first = MakeOptimizer(s, params, writer);
      Steps(problem, *first, params, 0, kSaveAfter, label);
      const Result saved = Snapshot(*first, s.algorithm, params);
      std::stringstream bytes;
      {
        torch::serialize::OutputArchive archive;
        first->save(archive);
        archive.save_to(bytes);
      }
      auto load = [&](torch::optim::Optimizer& optimizer) {
        torch::serialize::InputArchive archive;
        std::stringstream copy(bytes.str());
        archive.load_from(copy);
        optimizer.load(archive);
      };
      // LibTorch's class, as checkpoints were written before implementations existed.
      std::vector<at::Tensor> plain_params = Parameters(problem, at::kFloat);
      std::unique_ptr<torch::optim::Optimizer> plain =
          MakeOptimizer(s, plain_params, Implementation::kForLoop, /*plain=*/true);
      load(*plain);
      for (size_t i = 0; i < params.size(); ++i) plain_params[i].data().copy_(params[i].detach());
      ExpectSame(saved, Snapshot(*plain, s.algorithm, plain_params), 0,
                 label + ": torch::optim's class read back");

      // Resumed in a fresh process: new parameters with the saved values, a new optimizer.
      std::vector<at::Tensor> resumed_params = Parameters(problem, at::kFloat);
      for (size_t i = 0; i < params.size(); ++i) {
        resumed_params[i].data().copy_(params[i].detach());
      }
      std::unique_ptr<torch::optim::Optimizer> resumed = MakeOptimizer(s, resumed_params, reader);
      load(*resumed);
      ExpectSame(saved, Snapshot(*resumed, s.algorithm, resumed_params), 0, label + ": read back");
      Steps(problem, *resumed, resumed_params, kSaveAfter, kSteps, label);
      const Result result = Snapshot(*resumed, s.algorithm, resumed_params);
      if (writer == reader) {
        ExpectSame(RunSteps(s, writer, problem), result, 0, label + " vs uninterrupted");
      } else {
        ExpectSame(RunSteps(s, Implementation::kForLoop, problem), result,
                   s.algorithm == Algorithm::kSgd ? kFusedSgdUlps : kFusedAdamUlps,
                   label + " vs uninterrupted FOR_LOOP");
      }
    }
  }
}

// --- CUDA: run by the GPU check (--gtest_filter=*Cuda*:*CUDA*); skipped without a GPU. ---

#define SKIP_WITHOUT_CUDA()                                                              \
  if (!torch::cuda::is_available()) {                                                    \
    GTEST_SKIP() << "no CUDA device: this build or machine cannot run the CUDA kernels " \
                    "(run on a GPU machine with --gtest_filter=*Cuda*)";                 \
  }

std::vector<Scenario> CudaScenarios() {
  std::vector<Scenario> cases = {SgdScenarios()[0], SgdScenarios()[3], SgdScenarios()[5]};
  for (Algorithm algorithm : {Algorithm::kAdam, Algorithm::kAdamW}) {
    for (const Scenario& s : AdamScenarios(algorithm)) cases.push_back(s);
  }
  return cases;
}

TEST(MultiTensorCudaTest, CudaForeachAndFusedEqualForLoop) {
  SKIP_WITHOUT_CUDA();
  const at::TensorOptions cuda = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA);
  ExpectMatchesForLoop(CudaScenarios(), Implementation::kForeach, kCudaUlps, cuda);
  ExpectMatchesForLoop(CudaScenarios(), Implementation::kFused, kCudaUlps, cuda);
}

TEST(MultiTensorCudaTest, CudaEqualsCpu) {
  SKIP_WITHOUT_CUDA();
  const at::TensorOptions cuda = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA);
  const Problem problem = MakeProblem();
  for (const Scenario& s : CudaScenarios()) {
    const Result cpu = RunSteps(s, Implementation::kForLoop, problem);
    for (Implementation implementation :
         {Implementation::kForLoop, Implementation::kForeach, Implementation::kFused}) {
      ExpectSame(cpu, RunSteps(s, implementation, problem, cuda), kCudaUlps,
                 s.name + " CUDA " + ImplementationName(implementation) + " vs CPU FOR_LOOP");
    }
  }
}

// AUTO is FUSED for SGD and FOREACH for Adam and AdamW when every parameter is on CUDA.
TEST(MultiTensorCudaTest, CudaAutoIsFusedSgdAndForeachAdam) {
  SKIP_WITHOUT_CUDA();
  const at::TensorOptions cuda = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA);
  const Problem problem = MakeProblem();
  std::vector<at::Tensor> params = Parameters(problem, cuda);
  EXPECT_EQ(Resolve(Implementation::kAuto, Algorithm::kSgd, Groups(SgdScenarios()[2], params)),
            Implementation::kFused);
  EXPECT_EQ(Resolve(Implementation::kAuto, Algorithm::kAdamW,
                    Groups(AdamScenarios(Algorithm::kAdamW)[3], params)),
            Implementation::kForeach);
  ExpectSame(RunSteps(SgdScenarios()[4], Implementation::kFused, problem, cuda),
             RunSteps(SgdScenarios()[4], Implementation::kAuto, problem, cuda), 0,
             "SGD CUDA AUTO vs FUSED");
  const Scenario adamw = AdamScenarios(Algorithm::kAdamW)[3];
  ExpectSame(RunSteps(adamw, Implementation::kForeach, problem, cuda),
             RunSteps(adamw, Implementation::kAuto, problem, cuda), 0,
             adamw.name + " CUDA AUTO vs FOREACH");
}

// FUSED SGD is refused for reduced precision on the CPU only: on CUDA it updates bfloat16
// parameters as the loop does, within bfloat16 rounding (not yet measured on a GPU: twice
// BFloat16Parameters' bound; parameters left unchanged would be off by hundreds).
TEST(MultiTensorCudaTest, CudaFusedSgdUpdatesBFloat16Parameters) {
  SKIP_WITHOUT_CUDA();
  const at::TensorOptions cuda = at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA);
  ExpectMatchesForLoop({SgdScenarios()[3], SgdScenarios()[5]}, Implementation::kFused,
                       8 * kBFloat16Ulps, cuda);
}

// A checkpoint written on CUDA by FUSED resumes on CUDA with FOREACH.
TEST(MultiTensorCudaTest, CudaCheckpointResumesAcrossImplementations) {
  SKIP_WITHOUT_CUDA();
  const at::TensorOptions cuda = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA);
  const Problem problem = MakeProblem();
  for (const Scenario& s : {SgdScenarios()[5], AdamScenarios(Algorithm::kAdamW)[3]}) {
    std::vector<at::Tensor> params = Parameters(problem, cuda);
    std::unique_ptr<torch::optim::Optimizer> first =
        MakeOptimizer(s, params, Implementation::kFused);
    Steps(problem, *first, params, 0, 3, s.name);
    std::stringstream bytes;
    {
      torch::serialize::OutputArchive archive;
      first->save(archive);
      archive.save_to(bytes);
    }
    std::vector<at::Tensor> resumed_params = Parameters(problem, cuda);
    for (size_t i = 0; i < params.size(); ++i) resumed_params[i].data().copy_(params[i].detach());
    std::unique_ptr<torch::optim::Optimizer> resumed =
        MakeOptimizer(s, resumed_params, Implementation::kForeach);
    torch::serialize::InputArchive archive;
    archive.load_from(bytes, at::Device(at::kCUDA));
    resumed->load(archive);
    ExpectSame(Snapshot(*first, s.algorithm, params),
               Snapshot(*resumed, s.algorithm, resumed_params), 0, s.name + " CUDA read back");
    Steps(problem, *resumed, resumed_params, 3, kSteps, s.name);
    ExpectSame(RunSteps(s, Implementation::kForLoop, problem, cuda),
               Snapshot(*resumed, s.algorithm, resumed_params), kCudaUlps,
               s.name + " CUDA FUSED then FOREACH vs FOR_LOOP");
  }
}

}  // namespace
}  // namespace vision::engine::optim
