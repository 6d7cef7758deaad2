// 3x3 stride-1 convolutions by Winograd's minimal filtering, F(4x4, 3x3), on the CPU.
//
// A 3x3 convolution over a 4x4 output tile reads a 6x6 input patch; in the Winograd domain
// (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", 2016) it is an
// element-wise product of the transformed patch B^T d B and the transformed filter G g G^T
// followed by A^T (.) A, so over C input and K output channels the whole layer becomes 36
// independent [K, C] x [C, tiles] matrix products: 4x fewer multiplications than direct
// convolution, and products that MKL runs near its peak even at 64 channels. The same holds for
// both gradients: the input gradient is the forward of the output gradient with the filters
// flipped and transposed, and the filter gradient is the adjoint of the forward's products,
// G^T (sum over tiles of (A dY A^T) (.) (B^T d B)) G.
//
// oneDNN, which ATen uses for CPU convolutions, has no Winograd kernels for AVX2 machines; on
// DBNet-ResNet-18's 3x3 layers at 640 x 640 this path takes 0.48-0.75 of oneDNN's time for
// forward plus backward, 0.56 summed over the layers (//models/ops:winograd_conv_benchmark),
// and the whole training step 0.61 of PyTorch's (benchmarks/dbnet_step.sh, "winograd" row).
// The price is rounding: the transforms' coefficients (up to 8 and 1/24) make the float32
// error against float64 about 5e-6 to 1e-5 of the output's magnitude where direct convolution
// gives 4e-7 to 1.6e-6 (winograd_conv_test measures both); cuDNN makes the same trade when it
// picks its Winograd algorithms on a GPU. In float64 it equals direct convolution to 1e-12.
// Tiles: the 36 transformed matrices are each one GEMM (MKL through at::mm); the transforms
// work on whole rows of tiles in a phase layout (column 4 tx + p at p * len + tx) so that gcc
// vectorises them.
//
// Off by default: core::SetCpuConvolution(kWinograd) (TrainPipelineConfig.cpu_convolution)
// turns it on for every ops::Conv2d that qualifies.
#ifndef VISION_MODELS_OPS_WINOGRAD_CONV_H_
#define VISION_MODELS_OPS_WINOGRAD_CONV_H_

#include <ATen/core/Tensor.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

namespace vision::models::ops {

// at::conv2d(input, weight, {}, /*stride=*/1, /*padding=*/1) for contiguous CPU [N, C, H, W]
// float or double input and [K, C, 3, 3] weight, differentiable in both (first order).
at::Tensor WinogradConv3x3(const at::Tensor& input, const at::Tensor& weight);

// Whether WinogradConv3x3 computes conv2d(input, weight, bias, stride, padding, dilation,
// groups): a CPU float32 (or float64, which tests compare at 1e-12) [N, C, H, W] contiguous
// input outside CPU autocast, a 3x3 weight of its type, stride 1, padding 1, dilation 1, one
// group and no bias.
bool WinogradConv3x3Applies(const at::Tensor& input, const at::Tensor& weight, bool has_bias,
                            const torch::nn::detail::ConvNdOptions<2>& options);

// torch::nn::Conv2d (same parameters, names, initialisation and checkpoints) whose forward
// takes WinogradConv3x3 when core::GetCpuConvolution() is kWinograd and the call qualifies
// (WinogradConv3x3Applies), and ATen's convolution otherwise.
class Conv2dImpl : public torch::nn::Conv2dImpl {
 public:
  using torch::nn::Conv2dImpl::Conv2dImpl;
  at::Tensor forward(const at::Tensor& input);
};
TORCH_MODULE(Conv2d);

}  // namespace vision::models::ops

#endif  // VISION_MODELS_OPS_WINOGRAD_CONV_H_
