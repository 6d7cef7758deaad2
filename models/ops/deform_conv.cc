#include "models/ops/deform_conv.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/nn/init.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>

namespace vision::models::ops {

at::Tensor ModulatedDeformConv2d(const at::Tensor& input, const at::Tensor& offset,
                                 const at::Tensor& mask, const at::Tensor& weight,
                                 const at::Tensor& bias, at::IntArrayRef stride,
                                 at::IntArrayRef padding, at::IntArrayRef dilation) {
  TORCH_CHECK(input.dim() == 4, "deformable convolution: input must be [N, C, H, W], got ",
              input.sizes());
  TORCH_CHECK(weight.dim() == 4 && weight.size(1) == input.size(1),
              "deformable convolution: weight must be [O, ", input.size(1), ", kh, kw], got ",
              weight.sizes());
  TORCH_CHECK(stride.size() == 2 && padding.size() == 2 && dilation.size() == 2,
              "deformable convolution: stride, padding and dilation need 2 values each");
  TORCH_CHECK(stride[0] > 0 && stride[1] > 0 && dilation[0] > 0 && dilation[1] > 0 &&
                  padding[0] >= 0 && padding[1] >= 0,
              "deformable convolution: stride ", stride, " and dilation ", dilation,
              " must be positive, padding ", padding, " non-negative");
  const int64_t n = input.size(0);
  const int64_t height = input.size(2);
  const int64_t width = input.size(3);
  const int64_t out_channels = weight.size(0);
  const int64_t kh = weight.size(2);
  const int64_t kw = weight.size(3);
  const int64_t k = kh * kw;
  const int64_t out_h = (height + 2 * padding[0] - dilation[0] * (kh - 1) - 1) / stride[0] + 1;
  const int64_t out_w = (width + 2 * padding[1] - dilation[1] * (kw - 1) - 1) / stride[1] + 1;
  TORCH_CHECK(out_h > 0 && out_w > 0, "deformable convolution: input ", input.sizes(),
              " is smaller than the dilated kernel");
  TORCH_CHECK(offset.sizes().equals({n, 2 * k, out_h, out_w}),
              "deformable convolution: offset must be [", n, ", ", 2 * k, ", ", out_h, ", ", out_w,
              "], got ", offset.sizes());
  TORCH_CHECK(mask.sizes().equals({n, k, out_h, out_w}), "deformable convolution: mask must be [",
              n, ", ", k, ", ", out_h, ", ", out_w, "], got ", mask.sizes());
  TORCH_CHECK(!bias.defined() || bias.sizes().equals({out_channels}),
              "deformable convolution: bias must be [", out_channels, "], got ", bias.sizes());

  // Sampling positions in input pixels: the regular grid of the convolution (output position
  // times stride, minus padding, plus the kernel tap times the dilation, taps in row-major
  // order) plus the learned offsets. They are laid out as an [N, Hout*kh, Wout*kw] image in
  // which output pixel (y, x) owns the kh x kw block of its taps, so that a plain convolution
  // with stride (kh, kw) over the sampled image does the weighted sum: it runs on the fast
  // convolution kernels (oneDNN, cuDNN), where a matmul with [N, C*kh*kw, Hout*Wout] columns
  // was 20 times slower on CPU (LibTorch with a generic BLAS).
  const at::TensorOptions options = input.options();
  const auto to_blocks = [&](const at::Tensor& taps) {  // [N, kh, kw, Hout, Wout] -> blocks
    return taps.reshape({n, kh, kw, out_h, out_w})
        .permute({0, 3, 1, 4, 2})
        .reshape({n, out_h * kh, out_w * kw});
  };
  const at::Tensor tap_rows = (at::arange(kh, options) * dilation[0]).view({1, kh, 1, 1, 1});
  const at::Tensor tap_cols = (at::arange(kw, options) * dilation[1]).view({1, 1, kw, 1, 1});
  const at::Tensor out_rows =
      (at::arange(out_h, options) * stride[0] - padding[0]).view({1, 1, 1, out_h, 1});
  const at::Tensor out_cols =
      (at::arange(out_w, options) * stride[1] - padding[1]).view({1, 1, 1, 1, out_w});
  const at::Tensor offset_pairs = offset.reshape({n, kh, kw, 2, out_h, out_w});
  const at::Tensor y = to_blocks(offset_pairs.select(3, 0) + (out_rows + tap_rows));
  const at::Tensor x = to_blocks(offset_pairs.select(3, 1) + (out_cols + tap_cols));
  // grid_sampler with align_corners = false reads pixel p at (2p + 1) / size - 1; unlike
  // align_corners = true this also holds for a size of 1. Zero padding gives mmcv's
  // bilinear: corners outside the input contribute 0.
  const at::Tensor grid = at::stack({(2 * x + 1) / width - 1, (2 * y + 1) / height - 1}, -1);
  const at::Tensor sampled = at::grid_sampler(input, grid, /*interpolation_mode=bilinear*/ 0,
                                              /*padding_mode=zeros*/ 0, /*align_corners=*/false);
  const at::Tensor modulated = sampled * to_blocks(mask).unsqueeze(1);
  // An undefined bias means none.
  return at::conv2d(modulated, weight, bias, /*stride=*/{kh, kw});
}

DeformConv2dImpl::DeformConv2dImpl(const DeformConv2dOptions& options) : options(options) {
  reset();
}

void DeformConv2dImpl::reset() {
  const int64_t kh = (*options.kernel_size())[0];
  const int64_t kw = (*options.kernel_size())[1];
  TORCH_CHECK(options.in_channels() > 0 && options.out_channels() > 0 && kh > 0 && kw > 0,
              "DeformConv2d: channels and kernel size must be positive");
  weight = register_parameter("weight",
                              at::empty({options.out_channels(), options.in_channels(), kh, kw}));
  if (options.bias()) bias = register_parameter("bias", at::empty({options.out_channels()}));
  conv_offset = register_module(
      "conv_offset", torch::nn::Conv2d(torch::nn::Conv2dOptions(options.in_channels(), 3 * kh * kw,
                                                                options.kernel_size())
                                           .stride(options.stride())
                                           .padding(options.padding())
                                           .dilation(options.dilation())
                                           .bias(true)));
  reset_parameters();
}

void DeformConv2dImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  const double bound = 1.0 / std::sqrt(static_cast<double>(weight[0].numel()));
  weight.uniform_(-bound, bound);
  if (bias.defined()) bias.zero_();
  ResetOffsetBranch();
}

void DeformConv2dImpl::ResetOffsetBranch() {
  torch::NoGradGuard no_grad;
  conv_offset->weight.zero_();
  conv_offset->bias.zero_();
}

at::Tensor DeformConv2dImpl::forward(const at::Tensor& input) {
  const int64_t k = (*options.kernel_size())[0] * (*options.kernel_size())[1];
  const at::Tensor predicted = conv_offset->forward(input);
  // mmcv chunks the 3k channels into (dy, dx) pairs for the first 2k and mask logits for the
  // last k, so its conv_offset weights keep their meaning here.
  return ModulatedDeformConv2d(input, predicted.narrow(1, 0, 2 * k),
                               predicted.narrow(1, 2 * k, k).sigmoid(), weight, bias,
                               options.stride(), options.padding(), options.dilation());
}

std::vector<std::string> OffsetBranchParameterNames(torch::nn::Module& root) {
  std::vector<std::string> names;
  for (const auto& item : root.named_modules("", /*include_self=*/false)) {
    const auto* deform = item.value()->as<DeformConv2dImpl>();
    if (deform == nullptr) continue;
    for (const auto& parameter : deform->conv_offset->named_parameters()) {
      names.push_back(item.key() + ".conv_offset." + parameter.key());
    }
  }
  return names;
}

}  // namespace vision::models::ops
