// DANet's two self-attention modules (Fu et al., "Dual Attention Network for Scene
// Segmentation", CVPR 2019, section 3.2-3.3), with the parameter names of the authors'
// PAM_Module and CAM_Module so their checkpoints' keys carry over.
#ifndef VISION_MODELS_DANET_ATTENTION_H_
#define VISION_MODELS_DANET_ATTENTION_H_

#include <cstdint>

#include <ATen/ATen.h>
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

namespace vision::models::danet {

struct PositionAttentionOptions {
  /* implicit */ PositionAttentionOptions(int64_t channels) : channels_(channels) {}
  // C: channels of the input and the output.
  TORCH_ARG(int64_t, channels);
  // Query and key projections have C / reduction channels (the paper's C/8).
  TORCH_ARG(int64_t, reduction) = 8;
};

// Position attention: every position is a weighted sum of the values at all positions,
// weighted by softmax_j(q_i . k_j) (q, k: 1x1 projections to C/8; v: 1x1 projection to C);
// out = gamma * that + x, with gamma a learnable scalar starting at 0 so training starts from
// the identity. Memory is O((HW)^2) per image: the attention map is the head's largest tensor.
class PositionAttentionImpl : public torch::nn::Module {
 public:
  explicit PositionAttentionImpl(const PositionAttentionOptions& options);
  // x: [N, C, H, W] -> [N, C, H, W].
  at::Tensor forward(const at::Tensor& x);

  PositionAttentionOptions options;
  torch::nn::Conv2d query_conv{nullptr};
  torch::nn::Conv2d key_conv{nullptr};
  torch::nn::Conv2d value_conv{nullptr};
  at::Tensor gamma;
};
TORCH_MODULE(PositionAttention);

// Channel attention: energy = X X^T over channels ([C, C], X the input flattened to
// [C, HW]); as the authors do, the softmax is taken of rowmax(energy) - energy (bounded
// above by 0, hence stable; it also makes the least similar channels weigh most);
// out = gamma * softmax(...) X + x, gamma a learnable scalar starting at 0. No parameters
// besides gamma: the paper computes the channel relations on the features directly.
class ChannelAttentionImpl : public torch::nn::Module {
 public:
  ChannelAttentionImpl();
  // x: [N, C, H, W] -> [N, C, H, W].
  at::Tensor forward(const at::Tensor& x);

  at::Tensor gamma;
};
TORCH_MODULE(ChannelAttention);

}  // namespace vision::models::danet

#endif  // VISION_MODELS_DANET_ATTENTION_H_
