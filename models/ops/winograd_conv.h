// 3x3 stride-1 convolutions, dilated or not, by Winograd's minimal filtering, F(4x4, 3x3), on
// the CPU.
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
// vectorises them. Dilated layers (DANet's ResNet stages 3 and 4) run as undilated ones over
// the input's polyphase components (WinogradConv3x3 below): on DANet-ResNet-50's at 512 x 512
// 0.37-0.45 of oneDNN's time.
//
// Off by default: core::SetCpuConvolution(kWinograd) (TrainPipelineConfig.cpu_convolution)
// turns it on for every ops::Conv2d that qualifies.
#ifndef VISION_MODELS_OPS_WINOGRAD_CONV_H_
#define VISION_MODELS_OPS_WINOGRAD_CONV_H_

#include <array>
#include <cstdint>

#include <ATen/core/Tensor.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

namespace vision::models::ops {

// at::conv2d(input, weight, {}, /*stride=*/1, /*padding=*/dilation, dilation) for contiguous CPU
// [N, C, H, W] float or double input and [K, C, 3, 3] weight, differentiable in both (first
// order). A dilated convolution (DANet's dilated ResNet stages) runs as dilation[0] x
// dilation[1] undilated ones over the input's polyphase components, batched into one.
at::Tensor WinogradConv3x3(const at::Tensor& input, const at::Tensor& weight,
                           std::array<int64_t, 2> dilation = {1, 1});

// Whether WinogradConv3x3 computes conv2d(input, weight, bias, stride, padding, dilation,
// groups): a CPU float32 (or float64, which tests compare at 1e-12) [N, C, H, W] contiguous
// input outside CPU autocast, a 3x3 weight of its type, stride 1, padding equal to the
// dilation (1 undilated: the output the input's size), one group and no bias.
bool WinogradConv3x3Applies(const at::Tensor& input, const at::Tensor& weight, bool has_bias,
                            const torch::nn::detail::ConvNdOptions<2>& options);

// The share of the 4x4 output tiles' pixels that lie inside the output, for an [height, width]
// input dilated by `dilation` (each polyphase component tiled on its own). A tile costs the
// same GEMM work however little of it is inside, so Winograd's 4x fewer multiplications than
// direct convolution become 4x coverage: a 16 x 16 map dilated by 16 (DANet's multi-grid at
// 128 x 128 crops) has one-pixel components and coverage 1/16, four times direct's work.
double WinogradTileCoverage(int64_t height, int64_t width, std::array<int64_t, 2> dilation);

// Below this coverage (Winograd at most 1.5x fewer multiplications than direct convolution, not
// enough to pay for the transforms) ops::Conv2d keeps ATen's convolution.
inline constexpr double kMinTileCoverage = 0.375;

// torch::nn::Conv2d (same parameters, names, initialisation and checkpoints) whose forward
// takes WinogradConv3x3 when core::GetCpuConvolution() is kWinograd, the call qualifies
// (WinogradConv3x3Applies) and its tiles are covered enough (kMinTileCoverage), and ATen's
// convolution otherwise.
class Conv2dImpl : public torch::nn::Conv2dImpl {
 public:
  using torch::nn::Conv2dImpl::Conv2dImpl;
  at::Tensor forward(const at::Tensor& input);
};
TORCH_MODULE(Conv2d);

}  // namespace vision::models::ops

#endif  // VISION_MODELS_OPS_WINOGRAD_CONV_H_
