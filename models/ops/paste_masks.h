// Pasting of per-RoI mask probabilities into the image, with the semantics of torchvision's
// roi_heads.paste_masks_in_image (Mask R-CNN's inference output).
#ifndef VISION_MODELS_OPS_PASTE_MASKS_H_
#define VISION_MODELS_OPS_PASTE_MASKS_H_

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include <cstdint>
#include <optional>

namespace vision::models::ops {

struct PasteMasksOptions {
  PasteMasksOptions(int64_t image_height, int64_t image_width)
      : image_height_(image_height), image_width_(image_width) {}
  TORCH_ARG(int64_t, image_height);
  TORCH_ARG(int64_t, image_width);
  // Zero border added around each M x M mask, with the box grown by (M + 2 padding) / M to
  // match, so that the mask fades out at the box edge instead of being cut there.
  TORCH_ARG(int64_t, padding) = 1;
  // If set, the result is the bool mask probability > threshold.
  TORCH_ARG(std::optional<double>, threshold) = std::nullopt;
};

// masks [N, 1, M, M] (or [N, M, M]) probabilities, boxes [N, 4] (x1, y1, x2, y2) in image
// pixels, same device. Returns [N, 1, image_height, image_width] in the masks' dtype (bool
// with a threshold). As torchvision does, the padded mask is resized bilinearly (half-pixel
// centres) to the expanded box truncated to integers, w = max(x2 - x1 + 1, 1) columns by h
// rows, and placed with its top-left pixel at (x1, y1), cut to the image; pixels outside the box
// are 0. A box wholly left of or above the image pastes nothing (torchvision's Python slices wrap
// around there and fail).
//
// On CUDA, for half and bfloat16 masks, and where autograd records (masks require grad with
// grad mode on), plain ATen ops: the resize is two batched matrix products with two-tap
// interpolation matrices whose rows outside the box are zero, so memory is the output's and
// autograd differentiates it with respect to masks. Otherwise (float or double on the CPU,
// Mask R-CNN's inference) a loop over each box's pixels inside the image, with the matrix
// products' weights and operation order (fused multiply-adds in the order of BLAS's dot
// products), so that it gives the same values in a fraction of the time (paste_masks_test
// compares the two). Throws c10::Error naming the argument on wrong shapes, dtypes or devices,
// NaN or infinite masks or box coordinates.
at::Tensor PasteMasks(const at::Tensor& masks, const at::Tensor& boxes,
                      const PasteMasksOptions& options);

}  // namespace vision::models::ops

#endif  // VISION_MODELS_OPS_PASTE_MASKS_H_
