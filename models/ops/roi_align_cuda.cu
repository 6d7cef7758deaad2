#include "models/ops/roi_align_cuda.h"

#include <algorithm>
#include <cstdint>

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

namespace vision::models::ops {
namespace {

constexpr int kThreads = 256;
// Grid-stride loops past this many blocks: enough to fill any current GPU.
constexpr int64_t kMaxBlocks = 4096;

int64_t Blocks(int64_t elements) {
  return std::min((elements + kThreads - 1) / kThreads, kMaxBlocks);
}

// Position of output (or grad_output) element `index` of a [K, C, PH, PW] tensor.
struct BinIndex {
  int64_t roi;
  int64_t channel;
  int64_t ph;
  int64_t pw;
};

__device__ BinIndex Unravel(int64_t index, int64_t channels, const RoIAlignGeometry& g) {
  BinIndex bin;
  bin.pw = index % g.output_width;
  bin.ph = (index / g.output_width) % g.output_height;
  bin.channel = (index / g.output_width / g.output_height) % channels;
  bin.roi = index / g.output_width / g.output_height / channels;
  return bin;
}

// One thread per output element.
template <typename T>
__global__ void ForwardKernel(int64_t total, const T* input, const T* rois, int64_t channels,
                              int64_t height, int64_t width, RoIAlignGeometry g, T* output) {
  for (int64_t index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; index < total;
       index += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const BinIndex bin = Unravel(index, channels, g);
    const RoIBins<T> bins = MakeRoIBins(rois + bin.roi * 5, g);
    const T* plane = input + (bins.batch * channels + bin.channel) * height * width;
    T sum = 0;
    BilinearTaps<T> taps;
    for (int64_t iy = 0; iy < bins.grid_h; ++iy) {
      const T y = SampleY(bins, bin.ph, iy);
      for (int64_t ix = 0; ix < bins.grid_w; ++ix) {
        if (!ComputeBilinearTaps(y, SampleX(bins, bin.pw, ix), height, width, &taps)) continue;
        sum += taps.weight[0] * plane[taps.offset[0]] + taps.weight[1] * plane[taps.offset[1]] +
               taps.weight[2] * plane[taps.offset[2]] + taps.weight[3] * plane[taps.offset[3]];
      }
    }
    output[index] = sum / bins.count;
  }
}

// One thread per grad_output element, scattering into grad_input; overlapping RoIs (and the
// samples of one bin) hit the same pixels, hence atomicAdd.
template <typename T>
__global__ void BackwardKernel(int64_t total, const T* grad_output, const T* rois, int64_t channels,
                               int64_t height, int64_t width, RoIAlignGeometry g, T* grad_input) {
  for (int64_t index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; index < total;
       index += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const BinIndex bin = Unravel(index, channels, g);
    const RoIBins<T> bins = MakeRoIBins(rois + bin.roi * 5, g);
    T* plane = grad_input + (bins.batch * channels + bin.channel) * height * width;
    const T grad = grad_output[index];
    BilinearTaps<T> taps;
    for (int64_t iy = 0; iy < bins.grid_h; ++iy) {
      const T y = SampleY(bins, bin.ph, iy);
      for (int64_t ix = 0; ix < bins.grid_w; ++ix) {
        if (!ComputeBilinearTaps(y, SampleX(bins, bin.pw, ix), height, width, &taps)) continue;
        for (int i = 0; i < 4; ++i) {
          atomicAdd(plane + taps.offset[i], grad * taps.weight[i] / bins.count);
        }
      }
    }
  }
}

}  // namespace

at::Tensor RoIAlignForwardCuda(const at::Tensor& input, const at::Tensor& rois,
                               const RoIAlignGeometry& g) {
  const c10::cuda::CUDAGuard device_guard(input.device());
  at::Tensor output =
      at::empty({rois.size(0), input.size(1), g.output_height, g.output_width}, input.options());
  const int64_t total = output.numel();
  if (total == 0) return output;
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "RoIAlignForwardCuda", [&] {
    ForwardKernel<scalar_t><<<Blocks(total), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        total, input.data_ptr<scalar_t>(), rois.data_ptr<scalar_t>(), input.size(1), input.size(2),
        input.size(3), g, output.data_ptr<scalar_t>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return output;
}

at::Tensor RoIAlignBackwardCuda(const at::Tensor& grad_output, const at::Tensor& rois,
                                at::IntArrayRef input_sizes, const RoIAlignGeometry& g) {
  const c10::cuda::CUDAGuard device_guard(grad_output.device());
  at::Tensor grad_input = at::zeros(input_sizes, grad_output.options());
  const int64_t total = grad_output.numel();
  if (total == 0) return grad_input;
  AT_DISPATCH_FLOATING_TYPES(grad_output.scalar_type(), "RoIAlignBackwardCuda", [&] {
    BackwardKernel<scalar_t><<<Blocks(total), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        total, grad_output.data_ptr<scalar_t>(), rois.data_ptr<scalar_t>(), input_sizes[1],
        input_sizes[2], input_sizes[3], g, grad_input.data_ptr<scalar_t>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return grad_input;
}

}  // namespace vision::models::ops
