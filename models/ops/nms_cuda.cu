#include "models/ops/nms_cuda.h"

#include <algorithm>
#include <cstdint>
#include <tuple>

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include "models/ops/nms_threshold.h"

namespace vision::models::ops {
namespace {

// Boxes per block of the IoU mask: one bit each in a 64-bit word.
constexpr int kBlockBoxes = 64;
// The reduce keeps one word per block in shared memory; 48 KiB is what every GPU grants a block
// without opting in.
constexpr int64_t kMaxMaskWords = 48 * 1024 / sizeof(uint64_t);
constexpr int kReduceThreads = 256;

// torchvision's devIoU arithmetic; `threshold` comes from LargestNotAbove, so the decision is
// that of the CPU code (which torchvision's CUDA kernel, comparing with a float threshold, can
// miss by one rounding).
template <typename T>
__device__ bool IouAbove(const T* a, const T* b, T threshold) {
  const T left = max(a[0], b[0]);
  const T right = min(a[2], b[2]);
  const T top = max(a[1], b[1]);
  const T bottom = min(a[3], b[3]);
  const T width = max(right - left, static_cast<T>(0));
  const T height = max(bottom - top, static_cast<T>(0));
  const T inter = width * height;
  const T area_a = (a[2] - a[0]) * (a[3] - a[1]);
  const T area_b = (b[2] - b[0]) * (b[3] - b[1]);
  return inter / (area_a + area_b - inter) > threshold;
}

// mask[i * blocks + c] bit k: box i (in rank order) overlaps box c * 64 + k, ranked below it, by
// more than the threshold. Block (c, r) compares the 64 boxes of row block r with those of column
// block c; blocks below the diagonal have nothing to compare and leave their words unwritten.
template <typename T>
__global__ void IouMaskKernel(int64_t n, T threshold, const T* boxes, uint64_t* mask) {
  const int64_t row_block = blockIdx.y;
  const int64_t col_block = blockIdx.x;
  if (row_block > col_block) return;
  const int64_t blocks = (n + kBlockBoxes - 1) / kBlockBoxes;
  const int row_count = static_cast<int>(min(n - row_block * kBlockBoxes, int64_t{kBlockBoxes}));
  const int col_count = static_cast<int>(min(n - col_block * kBlockBoxes, int64_t{kBlockBoxes}));

  __shared__ T col_boxes[kBlockBoxes * 4];
  if (threadIdx.x < col_count) {
    const T* box = boxes + (col_block * kBlockBoxes + threadIdx.x) * 4;
    for (int k = 0; k < 4; ++k) col_boxes[threadIdx.x * 4 + k] = box[k];
  }
  __syncthreads();
  if (threadIdx.x >= row_count) return;

  const int64_t row = row_block * kBlockBoxes + threadIdx.x;
  const T* box = boxes + row * 4;
  uint64_t bits = 0;
  for (int k = row_block == col_block ? threadIdx.x + 1 : 0; k < col_count; ++k) {
    if (IouAbove(box, col_boxes + k * 4, threshold)) bits |= uint64_t{1} << k;
  }
  mask[row * blocks + col_block] = bits;
}

// The greedy pass in one thread block: boxes are visited in rank order; `removed` is the union of
// the mask rows of the boxes kept so far, one word per 64 boxes, each word owned by one thread.
// Every thread reads the same mask word for the current block from global memory, so all take
// the same decisions and the only barrier needed is one per block of 64 boxes.
__global__ void KeepFromMaskKernel(int64_t n, const uint64_t* mask, bool* keep) {
  extern __shared__ uint64_t removed[];
  const int64_t blocks = (n + kBlockBoxes - 1) / kBlockBoxes;
  for (int64_t j = threadIdx.x; j < blocks; j += blockDim.x) removed[j] = 0;
  for (int64_t block = 0; block < blocks; ++block) {
    __syncthreads();
    uint64_t removed_here = removed[block];
    const int count = static_cast<int>(min(n - block * kBlockBoxes, int64_t{kBlockBoxes}));
    for (int k = 0; k < count; ++k) {
      if ((removed_here >> k) & 1) continue;
      const int64_t i = block * kBlockBoxes + k;
      if (threadIdx.x == 0) keep[i] = true;
      const uint64_t* row = mask + i * blocks;
      removed_here |= row[block];
      for (int64_t j = block + 1 + threadIdx.x; j < blocks; j += blockDim.x) removed[j] |= row[j];
    }
  }
}

}  // namespace

at::Tensor NmsCuda(const at::Tensor& boxes, const at::Tensor& scores, double iou_threshold) {
  const c10::cuda::CUDAGuard device_guard(boxes.device());
  const int64_t n = boxes.size(0);
  const int64_t blocks = (n + kBlockBoxes - 1) / kBlockBoxes;
  TORCH_CHECK(blocks <= kMaxMaskWords, "Nms: at most ", kMaxMaskWords * kBlockBoxes,
              " boxes per call on CUDA, got ", n,
              "; split the boxes (by category, say) or run on CPU");
  const at::Tensor order =
      std::get<1>(scores.sort(/*stable=*/true, /*dim=*/0, /*descending=*/true));
  const at::Tensor sorted = boxes.index_select(0, order).contiguous();
  at::Tensor mask = at::empty({n * blocks}, boxes.options().dtype(at::kLong));
  at::Tensor keep = at::zeros({n}, boxes.options().dtype(at::kBool));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();

  AT_DISPATCH_FLOATING_TYPES(sorted.scalar_type(), "NmsCuda", [&] {
    IouMaskKernel<scalar_t><<<dim3(blocks, blocks), kBlockBoxes, 0, stream>>>(
        n, LargestNotAbove<scalar_t>(iou_threshold), sorted.data_ptr<scalar_t>(),
        reinterpret_cast<uint64_t*>(mask.data_ptr<int64_t>()));
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  KeepFromMaskKernel<<<1, static_cast<int>(std::min<int64_t>(blocks, kReduceThreads)),
                       blocks * sizeof(uint64_t), stream>>>(
      n, reinterpret_cast<const uint64_t*>(mask.data_ptr<int64_t>()), keep.data_ptr<bool>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return order.masked_select(keep);
}

}  // namespace vision::models::ops
