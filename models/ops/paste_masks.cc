#include "models/ops/paste_masks.h"

#include <cmath>

#include <ATen/ATen.h>
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
  const at::Tensor rows =
      InterpolationMatrix(y1, y2, height, padded_size, options.image_height(), padded.options());
  const at::Tensor columns =
      InterpolationMatrix(x1, x2, width, padded_size, options.image_width(), padded.options());
  const at::Tensor pasted = at::bmm(at::bmm(rows, padded), columns.transpose(1, 2)).unsqueeze(1);
  if (!options.threshold()) return pasted;
  return pasted > *options.threshold();
}

}  // namespace vision::models::ops
