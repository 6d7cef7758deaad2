#include "engine/loss_scaler.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <map>
#include <string>

namespace vision::engine {

LossScaler::LossScaler(LossScalerOptions options)
    : options_(options), scale_(options.enabled ? options.init_scale : 1.0) {}

at::Tensor LossScaler::Scale(const at::Tensor& loss) const {
  return options_.enabled ? loss * scale_ : loss;
}

bool LossScaler::UnscaleAndCheckFinite(const std::vector<at::Tensor>& params) const {
  // ATen's fused unscale-and-check (what PyTorch's GradScaler uses): one pass over each device's
  // gradients and one host synchronisation per device, not one per parameter.
  std::map<std::string, std::vector<at::Tensor>> grads;  // by device and dtype
  for (const at::Tensor& p : params) {
    const at::Tensor& grad = p.grad();
    if (grad.defined()) grads[grad.device().str() + c10::toString(grad.scalar_type())].push_back(grad);
  }
  at::NoGradGuard no_grad;
  bool finite = true;
  for (auto& [key, group] : grads) {
    const auto options = at::TensorOptions().dtype(at::kFloat).device(group.front().device());
    at::Tensor found_inf = at::zeros({1}, options);
    at::Tensor inv_scale = at::full({1}, options_.enabled ? 1.0 / scale_ : 1.0, options);
    at::_amp_foreach_non_finite_check_and_unscale_(group, found_inf, inv_scale);
    if (found_inf.item<float>() != 0.0f) finite = false;
  }
  return finite;
}

void LossScaler::Update(bool finite) {
  if (!finite) {
    ++skipped_steps_;
    growth_tracker_ = 0;
    if (options_.enabled) scale_ *= options_.backoff_factor;
    return;
  }
  if (!options_.enabled) return;
  if (++growth_tracker_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
}

std::vector<double> LossScaler::State() const {
  return {scale_, static_cast<double>(growth_tracker_), static_cast<double>(skipped_steps_)};
}

void LossScaler::LoadState(const std::vector<double>& state) {
  if (state.size() != 3) return;
  scale_ = state[0];
  growth_tracker_ = static_cast<int64_t>(state[1]);
  skipped_steps_ = static_cast<int64_t>(state[2]);
}

}  // namespace vision::engine
