#include "models/ops/boxes.h"

#include <cmath>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace vision::models::ops {

void CheckBoxes(std::string_view op, std::string_view name, const at::Tensor& boxes) {
  TORCH_CHECK(boxes.defined(), op, ": ", name, " is undefined");
  TORCH_CHECK(boxes.dim() == 2 && boxes.size(1) == 4, op, ": ", name,
              " must be [N, 4] (x1, y1, x2, y2), got ", boxes.sizes());
  TORCH_CHECK(at::isFloatingType(boxes.scalar_type()), op, ": ", name,
              " must be floating point, got ", boxes.scalar_type());
  TORCH_CHECK(boxes.size(0) == 0 || at::isfinite(boxes).all().item<bool>(), op, ": ", name,
              " contain NaN or infinite coordinates");
}

namespace {

void CheckSameDeviceAndType(std::string_view op, std::string_view name_a, const at::Tensor& a,
                            std::string_view name_b, const at::Tensor& b) {
  TORCH_CHECK(a.device() == b.device(), op, ": ", name_a, " is on ", a.device(), " but ", name_b,
              " on ", b.device());
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), op, ": ", name_a, " is ", a.scalar_type(),
              " but ", name_b, " is ", b.scalar_type());
}

}  // namespace

at::Tensor BoxIou(const at::Tensor& boxes1, const at::Tensor& boxes2) {
  CheckBoxes("BoxIou", "boxes1", boxes1);
  CheckBoxes("BoxIou", "boxes2", boxes2);
  CheckSameDeviceAndType("BoxIou", "boxes1", boxes1, "boxes2", boxes2);
  const auto area = [](const at::Tensor& b) {
    return (b.select(1, 2) - b.select(1, 0)) * (b.select(1, 3) - b.select(1, 1));
  };
  const at::Tensor lt = at::max(boxes1.slice(1, 0, 2).unsqueeze(1), boxes2.slice(1, 0, 2));
  const at::Tensor rb = at::min(boxes1.slice(1, 2, 4).unsqueeze(1), boxes2.slice(1, 2, 4));
  const at::Tensor wh = (rb - lt).clamp_min(0);
  const at::Tensor inter = wh.select(2, 0) * wh.select(2, 1);
  const at::Tensor union_area = area(boxes1).unsqueeze(1) + area(boxes2) - inter;
  return inter / union_area;
}

BoxCoder::BoxCoder(BoxCoderOptions options) : options_(options) {
  for (const double w : options_.weights()) {
    TORCH_CHECK(std::isfinite(w) && w > 0, "BoxCoder: weights must be positive and finite, got ",
                w);
  }
  TORCH_CHECK(!std::isnan(options_.bbox_xform_clip()), "BoxCoder: bbox_xform_clip is NaN");
}

at::Tensor BoxCoder::Encode(const at::Tensor& reference_boxes, const at::Tensor& proposals) const {
  CheckBoxes("BoxCoder::Encode", "reference_boxes", reference_boxes);
  CheckBoxes("BoxCoder::Encode", "proposals", proposals);
  CheckSameDeviceAndType("BoxCoder::Encode", "reference_boxes", reference_boxes, "proposals",
                         proposals);
  TORCH_CHECK(reference_boxes.size(0) == proposals.size(0),
              "BoxCoder::Encode: reference_boxes has ", reference_boxes.size(0),
              " boxes but proposals ", proposals.size(0));
  // The weights as tensors of the boxes' dtype, multiplied first, as torchvision's
  // encode_boxes does, so the rounding is the same.
  const at::Tensor weights =
      at::tensor(at::ArrayRef<double>(options_.weights().data(), 4), at::kDouble)
          .to(reference_boxes.options());
  const auto column = [](const at::Tensor& b, int64_t i) { return b.select(1, i).unsqueeze(1); };
  const at::Tensor ex_widths = column(proposals, 2) - column(proposals, 0);
  const at::Tensor ex_heights = column(proposals, 3) - column(proposals, 1);
  const at::Tensor ex_ctr_x = column(proposals, 0) + 0.5 * ex_widths;
  const at::Tensor ex_ctr_y = column(proposals, 1) + 0.5 * ex_heights;
  const at::Tensor gt_widths = column(reference_boxes, 2) - column(reference_boxes, 0);
  const at::Tensor gt_heights = column(reference_boxes, 3) - column(reference_boxes, 1);
  const at::Tensor gt_ctr_x = column(reference_boxes, 0) + 0.5 * gt_widths;
  const at::Tensor gt_ctr_y = column(reference_boxes, 1) + 0.5 * gt_heights;
  return at::cat(
      {weights[0] * (gt_ctr_x - ex_ctr_x) / ex_widths,
       weights[1] * (gt_ctr_y - ex_ctr_y) / ex_heights, weights[2] * at::log(gt_widths / ex_widths),
       weights[3] * at::log(gt_heights / ex_heights)},
      1);
}

at::Tensor BoxCoder::Decode(const at::Tensor& rel_codes, const at::Tensor& boxes) const {
  TORCH_CHECK(rel_codes.dim() == 2 && rel_codes.size(1) % 4 == 0,
              "BoxCoder::Decode: rel_codes must be [N, 4K], got ", rel_codes.sizes());
  TORCH_CHECK(at::isFloatingType(rel_codes.scalar_type()),
              "BoxCoder::Decode: rel_codes must be floating point, got ", rel_codes.scalar_type());
  TORCH_CHECK(rel_codes.size(0) == 0 || at::isfinite(rel_codes).all().item<bool>(),
              "BoxCoder::Decode: rel_codes contain NaN or infinite values");
  CheckBoxes("BoxCoder::Decode", "boxes", boxes);
  TORCH_CHECK(rel_codes.device() == boxes.device(), "BoxCoder::Decode: rel_codes is on ",
              rel_codes.device(), " but boxes on ", boxes.device());
  TORCH_CHECK(rel_codes.size(0) == boxes.size(0), "BoxCoder::Decode: rel_codes has ",
              rel_codes.size(0), " rows but boxes ", boxes.size(0));
  const at::Tensor b = boxes.to(rel_codes.scalar_type());
  const at::Tensor widths = (b.select(1, 2) - b.select(1, 0)).unsqueeze(1);
  const at::Tensor heights = (b.select(1, 3) - b.select(1, 1)).unsqueeze(1);
  const at::Tensor ctr_x = b.select(1, 0).unsqueeze(1) + 0.5 * widths;
  const at::Tensor ctr_y = b.select(1, 1).unsqueeze(1) + 0.5 * heights;
  const auto& w = options_.weights();
  const auto codes = [&](int64_t i) { return rel_codes.slice(1, i, at::indexing::None, 4); };
  const at::Tensor dx = codes(0) / w[0];
  const at::Tensor dy = codes(1) / w[1];
  const at::Tensor dw = (codes(2) / w[2]).clamp_max(options_.bbox_xform_clip());
  const at::Tensor dh = (codes(3) / w[3]).clamp_max(options_.bbox_xform_clip());
  const at::Tensor pred_ctr_x = dx * widths + ctr_x;
  const at::Tensor pred_ctr_y = dy * heights + ctr_y;
  const at::Tensor half_w = 0.5 * (at::exp(dw) * widths);
  const at::Tensor half_h = 0.5 * (at::exp(dh) * heights);
  return at::stack(
             {pred_ctr_x - half_w, pred_ctr_y - half_h, pred_ctr_x + half_w, pred_ctr_y + half_h},
             2)
      .flatten(1);
}

at::Tensor ClipBoxesToImage(const at::Tensor& boxes, int64_t height, int64_t width) {
  TORCH_CHECK(boxes.dim() >= 1 && boxes.size(-1) % 4 == 0,
              "ClipBoxesToImage: boxes must be [..., 4K], got ", boxes.sizes());
  TORCH_CHECK(at::isFloatingType(boxes.scalar_type()),
              "ClipBoxesToImage: boxes must be floating point, got ", boxes.scalar_type());
  TORCH_CHECK(height >= 0 && width >= 0, "ClipBoxesToImage: image size must be non-negative, got ",
              height, "x", width);
  TORCH_CHECK(boxes.numel() == 0 || at::isfinite(boxes).all().item<bool>(),
              "ClipBoxesToImage: boxes contain NaN or infinite coordinates");
  const int64_t last = boxes.dim() - 1;
  const at::Tensor x = boxes.slice(last, 0, at::indexing::None, 2).clamp(0, width);
  const at::Tensor y = boxes.slice(last, 1, at::indexing::None, 2).clamp(0, height);
  return at::stack({x, y}, last + 1).reshape(boxes.sizes());
}

at::Tensor RemoveSmallBoxes(const at::Tensor& boxes, double min_size) {
  CheckBoxes("RemoveSmallBoxes", "boxes", boxes);
  TORCH_CHECK(!std::isnan(min_size), "RemoveSmallBoxes: min_size is NaN");
  const at::Tensor ws = boxes.select(1, 2) - boxes.select(1, 0);
  const at::Tensor hs = boxes.select(1, 3) - boxes.select(1, 1);
  return at::nonzero((ws >= min_size) & (hs >= min_size)).select(1, 0);
}

}  // namespace vision::models::ops
