// BatchNorm2d whose batch statistics can be synchronised across data-parallel ranks.
//
// LibTorch modules call their children through member fields, so a SyncBatchNorm cannot be
// swapped in after a model is built (torch.nn.SyncBatchNorm.convert_sync_batchnorm relies on
// Python's attribute lookup). Models build their normalisation layers with this module
// instead of torch::nn::BatchNorm2d; distributed/sync_batchnorm then attaches a statistics
// synchroniser to every instance when the config asks for SyncBatchNorm, and the module keeps
// BatchNorm2d's parameter and buffer names, so checkpoints and torchvision weights load as is.
#ifndef VISION_CORE_BATCH_NORM_H_
#define VISION_CORE_BATCH_NORM_H_

#include <memory>

#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>

namespace vision::core {

// Computes a training-mode batch norm with statistics over every rank (and updates the
// running statistics with them). Implemented on c10d in distributed/sync_batchnorm.
class BatchNormSync {
 public:
  virtual ~BatchNormSync() = default;
  virtual at::Tensor Forward(const at::Tensor& input, const at::Tensor& weight,
                             const at::Tensor& bias, at::Tensor& running_mean,
                             at::Tensor& running_var, double momentum, double eps) = 0;
};

struct BatchNorm2dOptions {
  /* implicit */ BatchNorm2dOptions(int64_t num_features) : num_features(num_features) {}
  int64_t num_features;
  double eps = 1e-5;
  double momentum = 0.1;
};

class BatchNorm2dImpl : public torch::nn::Cloneable<BatchNorm2dImpl> {
 public:
  explicit BatchNorm2dImpl(BatchNorm2dOptions options);
  void reset() override;
  at::Tensor forward(const at::Tensor& input);

  // Synchronised statistics in training mode from now on; null restores local statistics.
  void SetSync(std::shared_ptr<BatchNormSync> sync) { sync_ = std::move(sync); }
  bool synchronized() const { return sync_ != nullptr; }

  BatchNorm2dOptions options;
  at::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  std::shared_ptr<BatchNormSync> sync_;
};

TORCH_MODULE(BatchNorm2d);

}  // namespace vision::core

#endif  // VISION_CORE_BATCH_NORM_H_
