#include "models/danet/attention.h"

#include <c10/util/Exception.h>

namespace vision::models::danet {
namespace {

torch::nn::Conv2d Pointwise(int64_t in, int64_t out) {
  // With bias, as the authors' projections.
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1));
}

}  // namespace

PositionAttentionImpl::PositionAttentionImpl(const PositionAttentionOptions& options_)
    : options(options_) {
  TORCH_CHECK(options.channels() > 0 && options.reduction() > 0 &&
                  options.channels() % options.reduction() == 0,
              "PositionAttention: channels (", options.channels(),
              ") must be a positive multiple of reduction (", options.reduction(), ")");
  const int64_t c = options.channels();
  query_conv = register_module("query_conv", Pointwise(c, c / options.reduction()));
  key_conv = register_module("key_conv", Pointwise(c, c / options.reduction()));
  value_conv = register_module("value_conv", Pointwise(c, c));
  gamma = register_parameter("gamma", at::zeros({1}));
}

at::Tensor PositionAttentionImpl::forward(const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 4 && x.size(1) == options.channels(),
              "PositionAttention: expected [N, ", options.channels(), ", H, W], got ", x.sizes());
  const int64_t n = x.size(0);
  const int64_t hw = x.size(2) * x.size(3);
  const at::Tensor query = query_conv->forward(x).view({n, -1, hw}).transpose(1, 2);  // [N, HW, C']
  const at::Tensor key = key_conv->forward(x).view({n, -1, hw});                      // [N, C', HW]
  // attention[i][j]: how much position j contributes to position i.
  const at::Tensor attention = at::softmax(at::bmm(query, key), -1);                 // [N, HW, HW]
  const at::Tensor value = value_conv->forward(x).view({n, -1, hw});                  // [N, C, HW]
  const at::Tensor out = at::bmm(value, attention.transpose(1, 2)).view(x.sizes());
  return gamma * out + x;
}

ChannelAttentionImpl::ChannelAttentionImpl() { gamma = register_parameter("gamma", at::zeros({1})); }

at::Tensor ChannelAttentionImpl::forward(const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 4, "ChannelAttention: expected [N, C, H, W], got ", x.sizes());
  const at::Tensor flat = x.flatten(2);                              // [N, C, HW]
  const at::Tensor energy = at::bmm(flat, flat.transpose(1, 2));     // [N, C, C]
  const at::Tensor inverted = std::get<0>(energy.max(-1, /*keepdim=*/true)) - energy;
  const at::Tensor attention = at::softmax(inverted, -1);
  const at::Tensor out = at::bmm(attention, flat).view(x.sizes());
  return gamma * out + x;
}

}  // namespace vision::models::danet
