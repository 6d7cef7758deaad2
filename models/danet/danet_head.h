// DANet's head (Fu et al., CVPR 2019, figure 2 and the authors' DANetHead): from the
// backbone's last feature map, a position-attention branch and a channel-attention branch,
// each 3x3 conv (to in/4, BN, ReLU) -> attention -> 3x3 conv (BN, ReLU); the two are summed.
// Three classifiers (dropout 0.1 + 1x1 conv) score the sum (the prediction), and each branch
// alone (deep supervision in training). Submodule names are the authors' (conv5a, sa, conv51,
// conv6, ...), so their state dicts map key for key under "head.".
//
// Also the auxiliary FCN head the authors' base network puts on stage 4 (layer3).
#ifndef VISION_MODELS_DANET_DANET_HEAD_H_
#define VISION_MODELS_DANET_DANET_HEAD_H_

#include <cstdint>

#include <ATen/ATen.h>
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/pimpl.h>

#include "models/danet/attention.h"

namespace vision::models::danet {

struct DANetHeadOptions {
  DANetHeadOptions(int64_t in_channels, int64_t num_classes)
      : in_channels_(in_channels), num_classes_(num_classes) {}
  TORCH_ARG(int64_t, in_channels);
  TORCH_ARG(int64_t, num_classes);
  // Channels of both branches; 0 means in_channels / 4 (the paper's).
  TORCH_ARG(int64_t, inter_channels) = 0;
  // Query/key reduction of the position attention (C/8).
  TORCH_ARG(int64_t, reduction) = 8;
  // Channel-wise (Dropout2d) drop probability before each classifier.
  TORCH_ARG(double, dropout) = 0.1;
};

// Logits at the feature map's resolution, [N, num_classes, h, w]. position and channel are
// undefined when only the fused output was asked for.
struct DANetHeadOutput {
  at::Tensor fused;
  at::Tensor position;
  at::Tensor channel;
};

class DANetHeadImpl : public torch::nn::Module {
 public:
  explicit DANetHeadImpl(const DANetHeadOptions& options);

  // x: [N, in_channels, h, w]. `all_outputs` false computes the fused logits only (inference).
  DANetHeadOutput forward(const at::Tensor& x, bool all_outputs = true);

  // Recompute the position (sa) / channel (sc) attention in backward instead of keeping its
  // activations; the position attention's [HW, HW] map is the head's largest tensor.
  void CheckpointAttention(bool position, bool channel) {
    checkpoint_position_ = position;
    checkpoint_channel_ = channel;
  }

  int64_t inter_channels() const { return inter_channels_; }

  DANetHeadOptions options;
  torch::nn::Sequential conv5a{nullptr}, conv5c{nullptr};
  PositionAttention sa{nullptr};
  ChannelAttention sc{nullptr};
  torch::nn::Sequential conv51{nullptr}, conv52{nullptr};
  // Classifiers: position-only, channel-only, fused.
  torch::nn::Sequential conv6{nullptr}, conv7{nullptr}, conv8{nullptr};

 private:
  int64_t inter_channels_;
  bool checkpoint_position_ = false;
  bool checkpoint_channel_ = false;
};
TORCH_MODULE(DANetHead);

struct FcnHeadOptions {
  FcnHeadOptions(int64_t in_channels, int64_t num_classes)
      : in_channels_(in_channels), num_classes_(num_classes) {}
  TORCH_ARG(int64_t, in_channels);
  TORCH_ARG(int64_t, num_classes);
  // Element-wise dropout before the classifier (the authors' FCNHead uses nn.Dropout).
  TORCH_ARG(double, dropout) = 0.1;
};

// 3x3 conv to in/4 + BN + ReLU + dropout + 1x1 conv: the auxiliary classifier on layer3.
class FcnHeadImpl : public torch::nn::Module {
 public:
  explicit FcnHeadImpl(const FcnHeadOptions& options);
  at::Tensor forward(const at::Tensor& x) { return conv5->forward(x); }

  FcnHeadOptions options;
  torch::nn::Sequential conv5{nullptr};
};
TORCH_MODULE(FcnHead);

}  // namespace vision::models::danet

#endif  // VISION_MODELS_DANET_DANET_HEAD_H_
