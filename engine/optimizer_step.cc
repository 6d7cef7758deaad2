#include "engine/optimizer_step.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

namespace vision::engine {

namespace {

// clip_grad_norm_'s total: the L2 norm of the per-tensor L2 norms, in the gradients' dtype.
at::Tensor TotalNormAsLibTorch(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> norms;
  for (const at::Tensor& p : params) {
    if (p.grad().defined()) norms.push_back(p.grad().norm(2));
  }
  if (norms.empty()) return at::zeros({});
  return norms.size() == 1 ? norms[0] : at::stack(norms).norm(2);
}

}  // namespace

at::Tensor GradNorm(const std::vector<at::Tensor>& params) {
  at::NoGradGuard no_grad;
  at::Tensor sum;
  for (const at::Tensor& p : params) {
    if (!p.grad().defined()) continue;
    const at::Tensor squares = p.grad().to(at::kDouble).pow(2).sum();
    sum = sum.defined() ? sum + squares : squares;
  }
  return sum.defined() ? sum.sqrt() : at::zeros({}, at::kDouble);
}

at::Tensor ClipGradNorm(const std::vector<at::Tensor>& params, double max_norm) {
  at::NoGradGuard no_grad;
  const at::Tensor total = TotalNormAsLibTorch(params);
  const at::Tensor factor = at::clamp(max_norm / (total + 1e-6), std::nullopt, 1.0);
  for (const at::Tensor& p : params) {
    if (p.grad().defined()) p.grad().mul_(factor);
  }
  return total;
}

OptimizerPhaseResult RunOptimizerPhase(const std::vector<at::Tensor>& params, LossScaler& scaler,
                                       core::Optimizer& optimizer,
                                       const OptimizerPhaseOptions& options) {
  OptimizerPhaseResult result;
  auto clip_or_measure = [&] {
    if (options.clip_grad_norm > 0) {
      result.grad_norm = ClipGradNorm(params, options.clip_grad_norm);
    } else if (options.want_grad_norm) {
      result.grad_norm = GradNorm(params);
    }
  };
  result.decided_on_device = optimizer.SkipsOnDevice();
  if (result.decided_on_device) {
    result.skipped = scaler.UnscaleAndRecord(params);
    // Non-finite gradients make the norm and the clipped gradients non-finite too; the step
    // that would use them is skipped.
    clip_or_measure();
    optimizer.StepUnless(result.skipped);
    return result;
  }
  const bool finite = scaler.UnscaleAndCheckFinite(params);
  scaler.Update(finite);
  result.skipped = at::scalar_tensor(finite ? 0.0 : 1.0, at::kFloat);
  if (finite) {
    clip_or_measure();
    optimizer.torch_optimizer().step();
  }
  return result;
}

}  // namespace vision::engine
