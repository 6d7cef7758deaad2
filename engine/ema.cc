#include "engine/ema.h"

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
