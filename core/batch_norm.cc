#include "core/batch_norm.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>

namespace vision::core {

BatchNorm2dImpl::BatchNorm2dImpl(BatchNorm2dOptions options_) : options(options_) { reset(); }

void BatchNorm2dImpl::reset() {
  weight = register_parameter("weight", at::ones({options.num_features}));
  bias = register_parameter("bias", at::zeros({options.num_features}));
  running_mean = register_buffer("running_mean", at::zeros({options.num_features}));
  running_var = register_buffer("running_var", at::ones({options.num_features}));
  num_batches_tracked = register_buffer("num_batches_tracked", at::zeros({}, at::kLong));
}

at::Tensor BatchNorm2dImpl::forward(const at::Tensor& input) {
  TORCH_CHECK(input.dim() == 4, "BatchNorm2d expects (N, C, H, W) input, got ", input.sizes());
  if (is_training()) {
    at::NoGradGuard no_grad;
    num_batches_tracked.add_(1);
  }
  if (is_training() && sync_ != nullptr) {
    return sync_->Forward(input, weight, bias, running_mean, running_var, options.momentum,
                          options.eps);
  }
  return at::batch_norm(input, weight, bias, running_mean, running_var, is_training(),
                        options.momentum, options.eps, at::globalContext().userEnabledCuDNN());
}

}  // namespace vision::core
