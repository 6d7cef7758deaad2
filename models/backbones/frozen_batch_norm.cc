#include "models/backbones/frozen_batch_norm.h"

#include <cstdint>

#include <ATen/ATen.h>

namespace vision::models::backbones {

FrozenBatchNorm2dImpl::FrozenBatchNorm2dImpl(int64_t num_features, double eps)
    : num_features_(num_features), eps_(eps) {
  reset();
}

void FrozenBatchNorm2dImpl::reset() {
  weight = register_buffer("weight", at::ones({num_features_}));
  bias = register_buffer("bias", at::zeros({num_features_}));
  running_mean = register_buffer("running_mean", at::zeros({num_features_}));
  running_var = register_buffer("running_var", at::ones({num_features_}));
}

at::Tensor FrozenBatchNorm2dImpl::forward(const at::Tensor& input) {
  // Folded into one scale and shift per channel, as torchvision does.
  at::Tensor scale = weight * (running_var + eps_).rsqrt();
  at::Tensor shift = bias - running_mean * scale;
  return input * scale.reshape({1, -1, 1, 1}) + shift.reshape({1, -1, 1, 1});
}

}  // namespace vision::models::backbones
