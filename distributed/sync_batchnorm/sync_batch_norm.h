// BatchNorm whose batch statistics span every data-parallel rank (torch.nn.SyncBatchNorm):
// with a few images per device, per-device statistics are too noisy to train detectors and
// segmenters, so each forward all-reduces (sum, sum of squares, count) per channel and each
// backward all-reduces the two per-channel sums the input gradient needs.
//
// Every rank must run forward and backward through the same SyncBatchNorm layers in the same
// order: each call is a collective. Weight and bias gradients stay local, as the comm strategy
// averages them with the other gradients.
#ifndef VISION_DISTRIBUTED_SYNC_BATCHNORM_SYNC_BATCH_NORM_H_
#define VISION_DISTRIBUTED_SYNC_BATCHNORM_SYNC_BATCH_NORM_H_

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/arg.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "absl/status/statusor.h"

namespace vision::distributed::sync_batchnorm {

struct SyncBatchNormOptions {
  /* implicit */ SyncBatchNormOptions(int64_t num_features) : num_features_(num_features) {}
  TORCH_ARG(int64_t, num_features);
  TORCH_ARG(double, eps) = 1e-5;
  TORCH_ARG(double, momentum) = 0.1;
  TORCH_ARG(bool, affine) = true;
  TORCH_ARG(bool, track_running_stats) = true;
};

// Parameters and buffers carry BatchNorm2d's names (weight, bias, running_mean, running_var,
// num_batches_tracked), so checkpoints move between the two unchanged.
class SyncBatchNormImpl : public torch::nn::Cloneable<SyncBatchNormImpl> {
 public:
  SyncBatchNormImpl(SyncBatchNormOptions options, c10::intrusive_ptr<c10d::ProcessGroup> group);

  void reset() override;
  // Input (N, C, ...). Training (or no running statistics): global batch statistics; the
  // running statistics are updated with the global mean and unbiased variance. Eval: the
  // running statistics, without communication.
  at::Tensor forward(const at::Tensor& input);

  SyncBatchNormOptions options;
  at::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
};

TORCH_MODULE(SyncBatchNorm);

// Synchronises every normalisation layer below `module` and returns how many:
//  - each vision::core::BatchNorm2d (core/batch_norm.h, what this project's models use) gets a
//    c10d statistics synchroniser attached in place;
//  - each torch::nn::BatchNorm2d inside a Sequential or ModuleList is replaced by a
//    SyncBatchNorm with the same options, parameters and running statistics.
// With a world size of 1 nothing changes (it would only add overhead): 0, and a notice.
//
// A C++ module calls its children through its own member fields, which replacing a registered
// child cannot redirect; only children of torch::nn::Sequential and torch::nn::ModuleList are
// reached through the container. A torch::nn::BatchNorm2d anywhere else is an error naming
// its path, reported before anything is modified: build it as core::BatchNorm2d.
absl::StatusOr<int> ConvertSyncBatchNorm(torch::nn::Module& module,
                                         c10::intrusive_ptr<c10d::ProcessGroup> group);

}  // namespace vision::distributed::sync_batchnorm

#endif  // VISION_DISTRIBUTED_SYNC_BATCHNORM_SYNC_BATCH_NORM_H_
