#include "models/ops/max_pool.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace vision::models::ops {
namespace {

constexpr int64_t kKernel = 3, kStride = 2, kPadding = 1;

// One window's maximum and its index in the plane, in ATen's order (cpu_max_pool in
// aten/src/ATen/native/cpu/MaxPoolKernel.cpp): rows then columns, replaced on a greater value
// or a NaN, starting from -inf at the window's first element.
template <typename T>
inline void Window(const T* plane, int64_t width, int64_t row_begin, int64_t row_end,
                   int64_t col_begin, int64_t col_end, T* out, int64_t* index) {
  T best = -std::numeric_limits<T>::infinity();
  int64_t best_index = row_begin * width + col_begin;
  for (int64_t r = row_begin; r < row_end; ++r) {
    for (int64_t c = col_begin; c < col_end; ++c) {
      const T v = plane[r * width + c];
      if (v > best || std::isnan(v)) {
        best = v;
        best_index = r * width + c;
      }
    }
  }
  *out = best;
  *index = best_index;
}

// A full 3x3 window whose top-left element is `p` (index `base` in the plane): the same
// comparisons in the same order as Window, unrolled.
template <typename T>
inline void FullWindow(const T* p, int64_t width, int64_t base, T* out, int64_t* index) {
  T best = -std::numeric_limits<T>::infinity();
  int64_t best_index = base;
  const int64_t offsets[9] = {
      0, 1, 2, width, width + 1, width + 2, 2 * width, 2 * width + 1, 2 * width + 2};
  for (int k = 0; k < 9; ++k) {
    const T v = p[offsets[k]];
    if (v > best || std::isnan(v)) {
      best = v;
      best_index = base + offsets[k];
    }
  }
  *out = best;
  *index = best_index;
}

template <typename T>
void PoolPlanes(const T* input, T* output, int64_t* indices, int64_t planes, int64_t height,
                int64_t width, int64_t out_height, int64_t out_width) {
  at::parallel_for(0, planes, 1, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const T* in = input + plane * height * width;
      T* out = output + plane * out_height * out_width;
      int64_t* idx = indices + plane * out_height * out_width;
      for (int64_t oh = 0; oh < out_height; ++oh) {
        const int64_t top = oh * kStride - kPadding;
        const int64_t row_begin = std::max<int64_t>(top, 0);
        const int64_t row_end = std::min<int64_t>(top + kKernel, height);
        const bool full_rows = top >= 0 && top + kKernel <= height;
        T* out_row = out + oh * out_width;
        int64_t* idx_row = idx + oh * out_width;
        for (int64_t ow = 0; ow < out_width; ++ow) {
          const int64_t left = ow * kStride - kPadding;
          if (full_rows && left >= 0 && left + kKernel <= width) {
            FullWindow(in + top * width + left, width, top * width + left, out_row + ow,
                       idx_row + ow);
          } else {
            Window(in, width, row_begin, row_end, std::max<int64_t>(left, 0),
                   std::min<int64_t>(left + kKernel, width), out_row + ow, idx_row + ow);
          }
        }
      }
    }
  });
}

class StemMaxPoolFunction : public torch::autograd::Function<StemMaxPoolFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input) {
    const int64_t height = input.size(-2), width = input.size(-1);
    // floor((H + 2 * 1 - 3) / 2) + 1, ceil_mode false; every window starts inside the input.
    const int64_t out_height = (height + 2 * kPadding - kKernel) / kStride + 1;
    const int64_t out_width = (width + 2 * kPadding - kKernel) / kStride + 1;
    std::vector<int64_t> out_sizes = input.sizes().vec();
    out_sizes[out_sizes.size() - 2] = out_height;
    out_sizes[out_sizes.size() - 1] = out_width;
    at::Tensor output = at::empty(out_sizes, input.options());
    at::Tensor indices = at::empty(out_sizes, input.options().dtype(at::kLong));
    const int64_t planes = input.numel() / (height * width);
    AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "StemMaxPool", [&] {
      PoolPlanes(input.data_ptr<scalar_t>(), output.data_ptr<scalar_t>(),
                 indices.data_ptr<int64_t>(), planes, height, width, out_height, out_width);
    });
    ctx->save_for_backward({input, indices});
    ctx->mark_non_differentiable({indices});
    return output;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    return {at::max_pool2d_with_indices_backward(grads[0], saved[0], {kKernel, kKernel},
                                                 {kStride, kStride}, {kPadding, kPadding}, {1, 1},
                                                 /*ceil_mode=*/false, saved[1])};
  }
};

}  // namespace

at::Tensor StemMaxPool(const at::Tensor& input) {
  TORCH_CHECK(input.dim() == 3 || input.dim() == 4,
              "StemMaxPool: needs [C, H, W] or [N, C, H, W], got ", input.sizes());
  const bool own_kernel =
      input.device().is_cpu() && input.is_contiguous() &&
      (input.scalar_type() == at::kFloat || input.scalar_type() == at::kDouble) &&
      input.size(-2) > 0 && input.size(-1) > 0 && input.numel() > 0;
  if (!own_kernel) {
    return at::max_pool2d(input, {kKernel, kKernel}, {kStride, kStride}, {kPadding, kPadding});
  }
  return StemMaxPoolFunction::apply(input);
}

}  // namespace vision::models::ops
