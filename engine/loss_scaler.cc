#include "engine/loss_scaler.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <map>
#include <optional>
#include <string>

namespace vision::engine {

LossScaler::LossScaler(LossScalerOptions options)
    : options_(options), scale_(options.enabled ? options.init_scale : 1.0) {}

at::Tensor LossScaler::Scale(const at::Tensor& loss) const {
  if (!options_.enabled) return loss;
  return device_ ? loss * device_->scale : loss * scale_;
}

namespace {

// The defined gradients by device and dtype, as the fused check takes them.
std::map<std::string, std::vector<at::Tensor>> GradsByDeviceAndType(
    const std::vector<at::Tensor>& params) {
  std::map<std::string, std::vector<at::Tensor>> grads;
  for (const at::Tensor& p : params) {
    const at::Tensor& grad = p.grad();
    if (grad.defined())
      grads[grad.device().str() + c10::toString(grad.scalar_type())].push_back(grad);
  }
  return grads;
}

}  // namespace

bool LossScaler::UnscaleAndCheckFinite(const std::vector<at::Tensor>& params) {
  MoveStateToHost();
  // ATen's fused unscale-and-check (what PyTorch's GradScaler uses): one pass over each device's
  // gradients and one host synchronisation per device, not one per parameter.
  at::NoGradGuard no_grad;
  bool finite = true;
  for (auto& [key, group] : GradsByDeviceAndType(params)) {
    const auto options = at::TensorOptions().dtype(at::kFloat).device(group.front().device());
    at::Tensor found_inf = at::zeros({1}, options);
    at::Tensor inv_scale = at::full({1}, options_.enabled ? 1.0 / scale_ : 1.0, options);
    at::_amp_foreach_non_finite_check_and_unscale_(group, found_inf, inv_scale);
    if (found_inf.item<float>() != 0.0f) finite = false;
  }
  return finite;
}

at::Tensor LossScaler::UnscaleAndRecord(const std::vector<at::Tensor>& params) {
  const std::map<std::string, std::vector<at::Tensor>> grads = GradsByDeviceAndType(params);
  const c10::Device device =
      grads.empty() ? c10::Device(c10::kCPU) : grads.begin()->second.front().device();
  for (const auto& [key, group] : grads) {
    TORCH_CHECK(group.front().device() == device,
                "LossScaler::UnscaleAndRecord: the gradients are on ", device, " and ",
                group.front().device(), "; it keeps one device's state");
  }
  const auto on_device = at::TensorOptions().device(device);
  if (device_ && device_->scale.device() != device) MoveStateToHost();
  if (!device_) {
    device_ = DeviceState{at::full({}, scale_, on_device.dtype(at::kFloat)),
                          at::full({}, growth_tracker_, on_device.dtype(at::kInt)),
                          at::full({}, skipped_steps_, on_device.dtype(at::kLong))};
  }
  at::NoGradGuard no_grad;
  at::Tensor found_inf = at::zeros({}, on_device.dtype(at::kFloat));
  const at::Tensor inv_scale =
      options_.enabled ? device_->scale.reciprocal() : at::ones({}, on_device.dtype(at::kFloat));
  for (const auto& [key, group] : grads) {
    at::_amp_foreach_non_finite_check_and_unscale_(group, found_inf, inv_scale);
  }
  if (options_.enabled) {
    at::_amp_update_scale_(device_->scale, device_->growth_tracker, found_inf,
                           options_.growth_factor, options_.backoff_factor,
                           options_.growth_interval);
  }
  device_->skipped_steps.add_(found_inf.to(at::kLong));
  return found_inf;
}

void LossScaler::MoveStateToHost() {
  if (!device_) return;
  scale_ = device_->scale.item<double>();
  growth_tracker_ = device_->growth_tracker.item<int64_t>();
  skipped_steps_ = device_->skipped_steps.item<int64_t>();
  device_.reset();
}

double LossScaler::scale() const { return device_ ? device_->scale.item<double>() : scale_; }

int64_t LossScaler::growth_tracker() const {
  return device_ ? device_->growth_tracker.item<int64_t>() : growth_tracker_;
}

int64_t LossScaler::skipped_steps() const {
  return device_ ? device_->skipped_steps.item<int64_t>() : skipped_steps_;
}

void LossScaler::Update(bool finite) {
  MoveStateToHost();
  if (!finite) {
    ++skipped_steps_;
    growth_tracker_ = 0;
    if (options_.enabled) scale_ *= options_.backoff_factor;
    return;
  }
  if (!options_.enabled) return;
  if (++growth_tracker_ >= options_.growth_interval) {
    // Not past float32's range, where the scaled loss would overflow (as ATen's
    // _amp_update_scale_, which UnscaleAndRecord runs, and so PyTorch's GradScaler).
    if (std::isfinite(static_cast<float>(scale_ * options_.growth_factor))) {
      scale_ *= options_.growth_factor;
    }
    growth_tracker_ = 0;
  }
}

std::vector<double> LossScaler::State() const {
  return {scale(), static_cast<double>(growth_tracker()), static_cast<double>(skipped_steps())};
}

void LossScaler::LoadState(const std::vector<double>& state) {
  if (state.size() != 3) return;
  device_.reset();
  scale_ = state[0];
  growth_tracker_ = static_cast<int64_t>(state[1]);
  skipped_steps_ = static_cast<int64_t>(state[2]);
}

}  // namespace vision::engine
