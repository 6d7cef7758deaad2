#include "models/ops/paste_masks.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <type_traits>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include "models/ops/boxes.h"

namespace vision::models::ops {
namespace {

constexpr char kOp[] = "PasteMasks";

// [N, out_size, in_size] matrices resizing in_size samples to each box's `size` samples
// (torchvision's F.interpolate, bilinear, align_corners = false) and placing the result at
// `start` along an image axis of out_size pixels: row p holds the two interpolation weights of
// resized sample p - start, or zeros outside [start, end]. start, end, size: [N] int64.
at::Tensor InterpolationMatrix(const at::Tensor& start, const at::Tensor& end,
                               const at::Tensor& size, int64_t in_size, int64_t out_size,
                               const at::TensorOptions& options) {
  const at::Tensor pixel = at::arange(out_size, start.options()).unsqueeze(0);
  const at::Tensor dst = pixel - start.unsqueeze(1);
  const at::Tensor inside = (dst >= 0) & (pixel <= end.unsqueeze(1));
  // F.interpolate's source index, in the opmath type (float for float and half masks).
  const at::ScalarType math_type = options.dtype() == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor scale = static_cast<double>(in_size) / size.to(math_type).unsqueeze(1);
  const at::Tensor src = ((dst.to(math_type) + 0.5) * scale - 0.5).clamp_min(0);
  const at::Tensor lower = src.to(at::kLong).clamp(0, in_size - 1);
  const at::Tensor upper = (lower + 1).clamp_max(in_size - 1);
  const at::Tensor upper_weight = (src - lower.to(math_type)).clamp(0, 1) * inside;
  const at::Tensor lower_weight = (1 - upper_weight) * inside;
  at::Tensor matrix = at::zeros({start.size(0), out_size, in_size}, options);
  matrix.scatter_add_(2, lower.unsqueeze(2), lower_weight.unsqueeze(2).to(options.dtype()));
  matrix.scatter_add_(2, upper.unsqueeze(2), upper_weight.unsqueeze(2).to(options.dtype()));
  return matrix;
}

// One output pixel's two taps along an axis: the padded mask's samples lower and upper with
// weights lower_weight and upper_weight, exactly as InterpolationMatrix's row for that pixel holds
// them (upper == lower, at the last sample, is one entry of lower_weight + upper_weight there).
template <typename T>
struct Tap {
  int64_t lower;
  int64_t upper;
  T lower_weight;
  T upper_weight;
};

// The taps of pixels first..last (inside the image and the box) of a box starting at `start`
// with `size` resized samples, with InterpolationMatrix's arithmetic in T (its math type for
// float and double).
template <typename T>
void ComputeTaps(int64_t first, int64_t last, int64_t start, int64_t size, int64_t in_size,
                 std::vector<Tap<T>>& taps) {
  taps.clear();
  const T scale = static_cast<T>(in_size) / static_cast<T>(size);
  for (int64_t pixel = first; pixel <= last; ++pixel) {
    const T src = std::max((static_cast<T>(pixel - start) + T(0.5)) * scale - T(0.5), T(0));
    const int64_t lower = std::clamp<int64_t>(static_cast<int64_t>(src), 0, in_size - 1);
    const int64_t upper = std::min(lower + 1, in_size - 1);
    const T upper_weight = std::clamp(src - static_cast<T>(lower), T(0), T(1));
    const T lower_weight = T(1) - upper_weight;
    if (upper == lower) {
      taps.push_back({lower, upper, lower_weight + upper_weight, T(0)});
    } else {
      taps.push_back({lower, upper, lower_weight, upper_weight});
    }
  }
}

// a * wa + b * wb as BLAS computes a two-term dot product: the products accumulated in order with
// fused multiply-adds into a zero that starts as +0 (so -0 does not come out). With wb = 0 and
// b = a (a single tap) it is the single product.
template <typename T>
T TwoTaps(T a, T wa, T b, T wb) {
  return std::fma(b, wb, a * wa + T(0));
}

// The CPU paste for float and double without autograd: per box, only the pixels of its extent
// that lie in the image, with the matrix path's taps and BLAS's operation order (see TwoTaps), so
// that the result equals the matrix products' (rows, then columns) value for value. out:
// [N, H, W] contiguous, already holding the value of pixels outside the boxes. x1..height: [N]
// int64 on the CPU.
template <typename T, typename Out>
void PasteCpu(const at::Tensor& padded, const at::Tensor& x1, const at::Tensor& x2,
              const at::Tensor& y1, const at::Tensor& y2, const at::Tensor& width,
              const at::Tensor& height, std::optional<double> threshold, at::Tensor& out) {
  const int64_t n = padded.size(0);
  const int64_t p = padded.size(1);
  const int64_t image_height = out.size(1);
  const int64_t image_width = out.size(2);
  const T* mask_data = padded.data_ptr<T>();
  const int64_t* x1_data = x1.data_ptr<int64_t>();
  const int64_t* x2_data = x2.data_ptr<int64_t>();
  const int64_t* y1_data = y1.data_ptr<int64_t>();
  const int64_t* y2_data = y2.data_ptr<int64_t>();
  const int64_t* width_data = width.data_ptr<int64_t>();
  const int64_t* height_data = height.data_ptr<int64_t>();
  Out* out_data = out.data_ptr<Out>();
  // As `pasted > threshold` compares a T tensor with a scalar: in T.
  const T cut = threshold ? static_cast<T>(*threshold) : T(0);
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    std::vector<Tap<T>> rows, columns;
    std::vector<T> resized_row(p);
    for (int64_t i = begin; i < end; ++i) {
      const int64_t top = std::max<int64_t>(y1_data[i], 0);
      const int64_t bottom = std::min(y2_data[i], image_height - 1);
      const int64_t left = std::max<int64_t>(x1_data[i], 0);
      const int64_t right = std::min(x2_data[i], image_width - 1);
      if (top > bottom || left > right) continue;
      ComputeTaps(top, bottom, y1_data[i], height_data[i], p, rows);
      ComputeTaps(left, right, x1_data[i], width_data[i], p, columns);
      const T* mask = mask_data + i * p * p;
      for (int64_t y = top; y <= bottom; ++y) {
        const Tap<T>& r = rows[y - top];
        const T* lower = mask + r.lower * p;
        const T* upper = mask + r.upper * p;
        for (int64_t j = 0; j < p; ++j) {
          resized_row[j] = TwoTaps(lower[j], r.lower_weight, upper[j], r.upper_weight);
        }
        Out* out_row = out_data + (i * image_height + y) * image_width;
        for (int64_t x = left; x <= right; ++x) {
          const Tap<T>& c = columns[x - left];
          const T value =
              TwoTaps(resized_row[c.lower], c.lower_weight, resized_row[c.upper], c.upper_weight);
          if constexpr (std::is_same_v<Out, bool>) {
            out_row[x] = value > cut;
          } else {
            out_row[x] = value;
          }
        }
      }
    }
  });
}

}  // namespace

at::Tensor PasteMasks(const at::Tensor& masks, const at::Tensor& boxes,
                      const PasteMasksOptions& options) {
  TORCH_CHECK(masks.defined() && (masks.dim() == 3 || (masks.dim() == 4 && masks.size(1) == 1)),
              kOp, ": masks must be [N, 1, M, M] or [N, M, M], got ",
              masks.defined() ? masks.sizes() : at::IntArrayRef{});
  const at::Tensor square = masks.dim() == 4 ? masks.squeeze(1) : masks;
  TORCH_CHECK(square.size(1) == square.size(2) && square.size(1) > 0, kOp,
              ": masks must be square and non-empty, got ", masks.sizes());
  TORCH_CHECK(at::isFloatingType(masks.scalar_type()), kOp, ": masks must be floating point, got ",
              masks.scalar_type());
  TORCH_CHECK(masks.numel() == 0 || at::isfinite(masks).all().item<bool>(), kOp,
              ": masks contain NaN or infinite values");
  CheckBoxes(kOp, "boxes", boxes);
  TORCH_CHECK(boxes.size(0) == masks.size(0), kOp, ": masks has ", masks.size(0),
              " masks but boxes ", boxes.size(0));
  TORCH_CHECK(boxes.device() == masks.device(), kOp, ": masks is on ", masks.device(),
              " but boxes on ", boxes.device());
  TORCH_CHECK(options.image_height() >= 0 && options.image_width() >= 0, kOp,
              ": image size must be non-negative, got ", options.image_height(), "x",
              options.image_width());
  TORCH_CHECK(options.padding() >= 0, kOp, ": padding must be non-negative, got ",
              options.padding());
  TORCH_CHECK(!options.threshold() || !std::isnan(*options.threshold()), kOp, ": threshold is NaN");

  // torchvision's expand_masks and expand_boxes, in the boxes' dtype as there.
  const int64_t m = square.size(1);
  const int64_t p = options.padding();
  const at::Tensor padded = at::constant_pad_nd(square, {p, p, p, p});
  const double scale = static_cast<double>(m + 2 * p) / static_cast<double>(m);
  const auto half = [&](int64_t lo, int64_t hi) {
    return (boxes.select(1, hi) - boxes.select(1, lo)) * 0.5 * scale;
  };
  const auto centre = [&](int64_t lo, int64_t hi) {
    return (boxes.select(1, hi) + boxes.select(1, lo)) * 0.5;
  };
  const at::Tensor x1 = (centre(0, 2) - half(0, 2)).to(at::kLong);
  const at::Tensor x2 = (centre(0, 2) + half(0, 2)).to(at::kLong);
  const at::Tensor y1 = (centre(1, 3) - half(1, 3)).to(at::kLong);
  const at::Tensor y2 = (centre(1, 3) + half(1, 3)).to(at::kLong);
  const at::Tensor width = (x2 - x1 + 1).clamp_min(1);
  const at::Tensor height = (y2 - y1 + 1).clamp_min(1);

  const int64_t padded_size = m + 2 * p;
  const bool autograd = c10::GradMode::is_enabled() && masks.requires_grad();
  if (masks.device().is_cpu() && !autograd &&
      (masks.scalar_type() == at::kFloat || masks.scalar_type() == at::kDouble)) {
    const int64_t n = square.size(0);
    const int64_t image_height = options.image_height();
    const int64_t image_width = options.image_width();
    const at::Tensor contiguous = padded.contiguous();
    const at::Tensor c_x1 = x1.contiguous(), c_x2 = x2.contiguous(), c_y1 = y1.contiguous(),
                     c_y2 = y2.contiguous(), c_width = width.contiguous(),
                     c_height = height.contiguous();
    at::Tensor out;
    AT_DISPATCH_FLOATING_TYPES(masks.scalar_type(), "PasteMasks", [&] {
      if (options.threshold()) {
        // Pixels outside every box are 0, so the threshold decides them all at once.
        out = at::full({n, image_height, image_width},
                       scalar_t(0) > static_cast<scalar_t>(*options.threshold()),
                       masks.options().dtype(at::kBool));
        PasteCpu<scalar_t, bool>(contiguous, c_x1, c_x2, c_y1, c_y2, c_width, c_height,
                                 options.threshold(), out);
      } else {
        out = at::zeros({n, image_height, image_width}, masks.options());
        PasteCpu<scalar_t, scalar_t>(contiguous, c_x1, c_x2, c_y1, c_y2, c_width, c_height,
                                     std::nullopt, out);
      }
    });
    return out.unsqueeze(1);
  }
  const at::Tensor rows =
      InterpolationMatrix(y1, y2, height, padded_size, options.image_height(), padded.options());
  const at::Tensor columns =
      InterpolationMatrix(x1, x2, width, padded_size, options.image_width(), padded.options());
  const at::Tensor pasted = at::bmm(at::bmm(rows, padded), columns.transpose(1, 2)).unsqueeze(1);
  if (!options.threshold()) return pasted;
  return pasted > *options.threshold();
}

}  // namespace vision::models::ops
