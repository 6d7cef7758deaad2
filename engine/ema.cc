#include "engine/ema.h"

#include <map>
#include <utility>

#include <ATen/ATen.h>

namespace vision::engine {

ModelEma::ModelEma(const torch::nn::Module& model, double decay) : decay_(decay) {
  at::NoGradGuard no_grad;
  for (const auto& p : model.named_parameters()) values_[p.key()] = p.value().detach().clone();
  for (const auto& b : model.named_buffers()) values_[b.key()] = b.value().detach().clone();
}

void ModelEma::Update(const torch::nn::Module& model) {
  at::NoGradGuard no_grad;
  for (const auto& p : model.named_parameters()) {
    at::Tensor& avg = values_.at(p.key());
    if (avg.is_floating_point()) avg.mul_(decay_).add_(p.value().detach(), 1.0 - decay_);
  }
  for (const auto& b : model.named_buffers()) values_.at(b.key()).copy_(b.value());
}

void ModelEma::UpdateUnless(const torch::nn::Module& model, const at::Tensor& skip) {
  at::NoGradGuard no_grad;
  const at::Tensor skipped = skip > 0;
  // The two factors per dtype: (1, 0) where skipped, (decay, 1 - decay) otherwise.
  std::map<at::ScalarType, std::pair<at::Tensor, at::Tensor>> factors;
  auto factors_for = [&](const at::Tensor& t) -> const std::pair<at::Tensor, at::Tensor>& {
    auto [it, inserted] = factors.try_emplace(t.scalar_type());
    if (inserted) {
      const auto options = skip.options().dtype(t.scalar_type());
      it->second = {
          at::where(skipped, at::scalar_tensor(1.0, options), at::scalar_tensor(decay_, options)),
          at::where(skipped, at::scalar_tensor(0.0, options),
                    at::scalar_tensor(1.0 - decay_, options))};
    }
    return it->second;
  };
  for (const auto& p : model.named_parameters()) {
    at::Tensor& avg = values_.at(p.key());
    if (!avg.is_floating_point()) continue;
    const auto& [keep, take] = factors_for(avg);
    avg.mul_(keep).add_(p.value().detach() * take);
  }
  for (const auto& b : model.named_buffers()) {
    at::Tensor& avg = values_.at(b.key());
    avg.copy_(at::where(skipped, avg, b.value()));
  }
}

void ModelEma::Swap(torch::nn::Module& model) {
  at::NoGradGuard no_grad;
  auto swap = [&](const std::string& name, const at::Tensor& live) {
    at::Tensor& avg = values_.at(name);
    at::Tensor tmp = live.detach().clone();
    live.detach().copy_(avg);
    avg.copy_(tmp);
  };
  for (const auto& p : model.named_parameters()) swap(p.key(), p.value());
  for (const auto& b : model.named_buffers()) swap(b.key(), b.value());
}

}  // namespace vision::engine
