// BatchNorm2d with fixed statistics and affine transform (torchvision.ops.FrozenBatchNorm2d).
#ifndef VISION_MODELS_BACKBONES_FROZEN_BATCH_NORM_H_
#define VISION_MODELS_BACKBONES_FROZEN_BATCH_NORM_H_

#include <cstdint>

#include <ATen/ATen.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>

namespace vision::models::backbones {

// Detectors train with a few images per device, too few for batch statistics; freezing the
// pretrained statistics is the standard fix. weight, bias, running_mean and running_var are
// buffers, not parameters, so no optimizer touches them and train()/eval() changes nothing,
// and their names match BatchNorm2d's so torchvision state dicts load unchanged.
class FrozenBatchNorm2dImpl : public torch::nn::Cloneable<FrozenBatchNorm2dImpl> {
 public:
  explicit FrozenBatchNorm2dImpl(int64_t num_features, double eps = 1e-5);

  void reset() override;
  at::Tensor forward(const at::Tensor& input);

  int64_t num_features() const { return num_features_; }

  at::Tensor weight;
  at::Tensor bias;
  at::Tensor running_mean;
  at::Tensor running_var;

 private:
  int64_t num_features_;
  double eps_;
};

TORCH_MODULE(FrozenBatchNorm2d);

}  // namespace vision::models::backbones

#endif  // VISION_MODELS_BACKBONES_FROZEN_BATCH_NORM_H_
