// Modulated deformable convolution (DCNv2, Zhu et al., CVPR 2019), which DBNet's ResNet-50
// uses in its last three stages. LibTorch has no deform_conv operator (torchvision's lives in
// its own library, mmcv's in a CUDA extension), so this one is composed of ATen operators that
// autograd already differentiates: bilinear sampling by grid_sampler into an image of kh x kw
// blocks (one per output pixel), a mask multiply and a convolution with stride (kh, kw). It runs
// on every device and dtype those operators support, at the price of keeping the sampled image
// (C*kh*kw*Hout*Wout values per image, twice: before and after the mask) for backward.
#ifndef VISION_MODELS_OPS_DEFORM_CONV_H_
#define VISION_MODELS_OPS_DEFORM_CONV_H_

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/arg.h>
#include <torch/expanding_array.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

namespace vision::models::ops {

// out[n, o, y, x] = bias[o] + sum over c, i, j of weight[o, c, i, j] * mask[n, k, y, x] *
//   input[n, c](y * sh - ph + i * dh + offset[n, 2k, y, x],
//               x * sw - pw + j * dw + offset[n, 2k + 1, y, x])
// with k = i * kw + j, bilinear interpolation between pixels and zero outside the input: the
// definition of mmcv's modulated_deform_conv2d and torchvision.ops.deform_conv2d (one group, one
// deformable group). input [N, C, H, W]; offset [N, 2*kh*kw, Hout, Wout] as (dy, dx) pairs in
// pixels; mask [N, kh*kw, Hout, Wout]; weight [O, C, kh, kw]; bias [O] or undefined.
// Throws c10::Error on inconsistent shapes.
at::Tensor ModulatedDeformConv2d(const at::Tensor& input, const at::Tensor& offset,
                                 const at::Tensor& mask, const at::Tensor& weight,
                                 const at::Tensor& bias, at::IntArrayRef stride,
                                 at::IntArrayRef padding, at::IntArrayRef dilation);

struct DeformConv2dOptions {
  DeformConv2dOptions(int64_t in_channels, int64_t out_channels,
                      torch::ExpandingArray<2> kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  TORCH_ARG(int64_t, in_channels);
  TORCH_ARG(int64_t, out_channels);
  TORCH_ARG(torch::ExpandingArray<2>, kernel_size);
  TORCH_ARG(torch::ExpandingArray<2>, stride) = 1;
  TORCH_ARG(torch::ExpandingArray<2>, padding) = 0;
  TORCH_ARG(torch::ExpandingArray<2>, dilation) = 1;
  TORCH_ARG(bool, bias) = true;
};

// mmcv's ModulatedDeformConv2dPack: a regular convolution `conv_offset` (same kernel, stride,
// padding and dilation, with bias) predicts 2*kh*kw offsets and kh*kw mask logits per output
// pixel; the mask goes through a sigmoid. Parameters are named as mmcv's (weight, bias,
// conv_offset.weight, conv_offset.bias), so weight takes a plain convolution's weight from a
// torchvision checkpoint and mmcv DCN checkpoints map key for key. conv_offset starts at zero,
// so a fresh module computes 0.5 (= sigmoid(0)) times the plain convolution.
class DeformConv2dImpl : public torch::nn::Cloneable<DeformConv2dImpl> {
 public:
  explicit DeformConv2dImpl(const DeformConv2dOptions& options);

  void reset() override;
  // weight uniform in +-1/sqrt(C*kh*kw) and bias zero (mmcv's init), offset branch zero.
  void reset_parameters();
  // Zeroes conv_offset: after a caller re-initialises weights with its own scheme (mmdet's
  // ResNet zeroes the offset branch after its Kaiming pass).
  void ResetOffsetBranch();

  at::Tensor forward(const at::Tensor& input);

  DeformConv2dOptions options;
  at::Tensor weight;
  at::Tensor bias;
  torch::nn::Conv2d conv_offset{nullptr};
};
TORCH_MODULE(DeformConv2d);

// Full names ("layer2.0.conv2.conv_offset.weight") of the offset-branch parameters of every
// DeformConv2d below `root` (root itself excluded): the parameters a checkpoint of the same
// network with plain convolutions cannot have.
std::vector<std::string> OffsetBranchParameterNames(torch::nn::Module& root);

}  // namespace vision::models::ops

#endif  // VISION_MODELS_OPS_DEFORM_CONV_H_
