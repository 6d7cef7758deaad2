#include "engine/loss_scaler.h"

#include <ATen/ATen.h>

namespace vision::engine {

LossScaler::LossScaler(LossScalerOptions options)
    : options_(options), scale_(options.enabled ? options.init_scale : 1.0) {}

at::Tensor LossScaler::Scale(const at::Tensor& loss) const {
  return options_.enabled ? loss * scale_ : loss;
}

bool LossScaler::UnscaleAndCheckFinite(const std::vector<at::Tensor>& params) const {
  bool finite = true;
  at::NoGradGuard no_grad;
  for (const at::Tensor& p : params) {
    at::Tensor grad = p.grad();
    if (!grad.defined()) continue;
    if (options_.enabled) grad.mul_(1.0 / scale_);
    if (finite && !grad.isfinite().all().item<bool>()) finite = false;
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
