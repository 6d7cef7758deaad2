// DBNet's network after the backbone: the FPN neck of the paper (Fig. 2) and the DB head.
//
// Neck: a 1x1 lateral to inner_channels on each of the four backbone levels (strides 4, 8,
// 16, 32), a top-down pathway (nearest upsample + add), a 3x3 smoothing conv to
// inner_channels / 4 on each level, every level upsampled to stride 4 and concatenated
// (coarse first, as MhLiao/DB's SegDetector) into one inner_channels feature F.
// Head: two branches of the same shape on F, 3x3 conv-BN-ReLU, 2x2 stride-2 transposed
// conv-BN-ReLU, 2x2 stride-2 transposed conv, sigmoid: the probability map P and the
// threshold map T at the input's resolution. The approximate binary map
// B = 1 / (1 + exp(-k (P - T))) only exists for training, like T (the paper drops the
// threshold branch at inference).
// Initialisation as MhLiao/DB: Kaiming-normal convolutions, BN weight 1 and bias 1e-4.
#ifndef VISION_MODELS_DBNET_DB_HEAD_H_
#define VISION_MODELS_DBNET_DB_HEAD_H_

#include <cstdint>
#include <vector>

#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

namespace vision::models::dbnet {

struct DBNeckOptions {
  DBNeckOptions(std::vector<int64_t> in_channels, int64_t inner_channels)
      : in_channels_(std::move(in_channels)), inner_channels_(inner_channels) {}
  // Channels of the backbone's levels at strides 4, 8, 16, 32.
  TORCH_ARG(std::vector<int64_t>, in_channels);
  // Must be a multiple of 4.
  TORCH_ARG(int64_t, inner_channels) = 256;
};

class DBNeckImpl : public torch::nn::Module {
 public:
  explicit DBNeckImpl(DBNeckOptions options);

  // `features` fine to coarse (strides 4, 8, 16, 32) -> [N, inner_channels, H/4, W/4].
  // Sizes need not divide evenly: each upsampling goes to the finer level's exact size.
  at::Tensor forward(const std::vector<at::Tensor>& features);

 private:
  DBNeckOptions options_;
  std::vector<torch::nn::Conv2d> laterals_;
  std::vector<torch::nn::Conv2d> smooths_;
};
TORCH_MODULE(DBNeck);

struct DBHeadOptions {
  explicit DBHeadOptions(int64_t in_channels) : in_channels_(in_channels) {}
  // Channels of the fused feature; the branches' hidden width is in_channels / 4.
  TORCH_ARG(int64_t, in_channels);
  // Amplification factor of the approximate binarisation.
  TORCH_ARG(double, k) = 50.0;
};

// [N, 1, 4h, 4w] maps for an [N, C, h, w] feature; threshold and binary are undefined
// unless requested.
struct DBHeadOutput {
  at::Tensor probability;
  at::Tensor threshold;
  at::Tensor binary;
};

class DBHeadImpl : public torch::nn::Module {
 public:
  explicit DBHeadImpl(DBHeadOptions options);

  // Computes threshold and binary too iff the module is in training mode.
  DBHeadOutput forward(const at::Tensor& fused) { return forward(fused, is_training()); }
  // `with_threshold` also serves validation losses computed in eval mode.
  DBHeadOutput forward(const at::Tensor& fused, bool with_threshold);

 private:
  DBHeadOptions options_;
  torch::nn::Sequential probability_{nullptr};
  torch::nn::Sequential threshold_{nullptr};
};
TORCH_MODULE(DBHead);

// MhLiao/DB's weights_init over every submodule of `module` (not `module` itself).
void InitializeDBWeights(torch::nn::Module& module);

}  // namespace vision::models::dbnet

#endif  // VISION_MODELS_DBNET_DB_HEAD_H_
