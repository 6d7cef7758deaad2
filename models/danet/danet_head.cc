#include "models/danet/danet_head.h"

#include <c10/util/Exception.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>

#include "core/activation_checkpoint.h"
#include "core/batch_norm.h"
#include "models/ops/winograd_conv.h"

namespace vision::models::danet {
namespace {

// 3x3 conv without bias (BN follows) + BN + ReLU. core::BatchNorm2d, so that
// distributed.sync_batchnorm synchronises it; ops::Conv2d, so that cpu_convolution: WINOGRAD
// takes it (models/ops/winograd_conv.h).
torch::nn::Sequential ConvBnRelu(int64_t in, int64_t out) {
  return torch::nn::Sequential(
      ops::Conv2d(torch::nn::Conv2dOptions(in, out, 3).padding(1).bias(false)),
      core::BatchNorm2d(out), torch::nn::ReLU());
}

torch::nn::Sequential Classifier(int64_t in, int64_t classes, double dropout) {
  return torch::nn::Sequential(torch::nn::Dropout2d(dropout),
                               torch::nn::Conv2d(torch::nn::Conv2dOptions(in, classes, 1)));
}

}  // namespace

DANetHeadImpl::DANetHeadImpl(const DANetHeadOptions& options_) : options(options_) {
  TORCH_CHECK(options.in_channels() > 0 && options.num_classes() > 0,
              "DANetHead: in_channels and num_classes must be positive, got ",
              options.in_channels(), " and ", options.num_classes());
  inter_channels_ =
      options.inter_channels() > 0 ? options.inter_channels() : options.in_channels() / 4;
  TORCH_CHECK(inter_channels_ > 0, "DANetHead: in_channels ", options.in_channels(),
              " leaves no channels for the branches (in_channels / 4)");
  TORCH_CHECK(options.dropout() >= 0 && options.dropout() < 1,
              "DANetHead: dropout must be in [0, 1), got ", options.dropout());
  const int64_t c = inter_channels_;
  conv5a = register_module("conv5a", ConvBnRelu(options.in_channels(), c));
  conv5c = register_module("conv5c", ConvBnRelu(options.in_channels(), c));
  sa = register_module("sa", PositionAttention(PositionAttentionOptions(c).reduction(
                                 options.reduction())));
  sc = register_module("sc", ChannelAttention());
  conv51 = register_module("conv51", ConvBnRelu(c, c));
  conv52 = register_module("conv52", ConvBnRelu(c, c));
  conv6 = register_module("conv6", Classifier(c, options.num_classes(), options.dropout()));
  conv7 = register_module("conv7", Classifier(c, options.num_classes(), options.dropout()));
  conv8 = register_module("conv8", Classifier(c, options.num_classes(), options.dropout()));
}

DANetHeadOutput DANetHeadImpl::forward(const at::Tensor& x, bool all_outputs) {
  TORCH_CHECK(x.dim() == 4 && x.size(1) == options.in_channels(), "DANetHead: expected [N, ",
              options.in_channels(), ", h, w] features, got ", x.sizes());
  const at::Tensor position_in = conv5a->forward(x);
  const at::Tensor position_attended =
      checkpoint_position_
          ? core::CheckpointedForward(
                sa.ptr(), [this](const at::Tensor& t) { return sa->forward(t); }, position_in)
          : sa->forward(position_in);
  const at::Tensor position = conv51->forward(position_attended);

  const at::Tensor channel_in = conv5c->forward(x);
  const at::Tensor channel_attended =
      checkpoint_channel_
          ? core::CheckpointedForward(
                sc.ptr(), [this](const at::Tensor& t) { return sc->forward(t); }, channel_in)
          : sc->forward(channel_in);
  const at::Tensor channel = conv52->forward(channel_attended);

  DANetHeadOutput out;
  out.fused = conv8->forward(position + channel);
  if (all_outputs) {
    out.position = conv6->forward(position);
    out.channel = conv7->forward(channel);
  }
  return out;
}

FcnHeadImpl::FcnHeadImpl(const FcnHeadOptions& options_) : options(options_) {
  TORCH_CHECK(options.in_channels() >= 4 && options.num_classes() > 0,
              "FcnHead: need in_channels >= 4 and num_classes > 0, got ", options.in_channels(),
              " and ", options.num_classes());
  TORCH_CHECK(options.dropout() >= 0 && options.dropout() < 1,
              "FcnHead: dropout must be in [0, 1), got ", options.dropout());
  const int64_t inter = options.in_channels() / 4;
  conv5 = register_module(
      "conv5",
      torch::nn::Sequential(
          ops::Conv2d(
              torch::nn::Conv2dOptions(options.in_channels(), inter, 3).padding(1).bias(false)),
          core::BatchNorm2d(inter), torch::nn::ReLU(), torch::nn::Dropout(options.dropout()),
          torch::nn::Conv2d(torch::nn::Conv2dOptions(inter, options.num_classes(), 1))));
}

}  // namespace vision::models::danet
