// Anchors of a feature pyramid (Lin et al., FPN, 2017): at every location of level l, one box
// per (size, aspect ratio) of that level, centred on the location's top-left pixel times the
// level's stride, as torchvision's AnchorGenerator (cell anchors rounded to integers; the
// stride of a level is the padded batch size divided by the feature size, integer division).
#ifndef VISION_MODELS_MASK_RCNN_ANCHOR_GENERATOR_H_
#define VISION_MODELS_MASK_RCNN_ANCHOR_GENERATOR_H_

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

namespace vision::models::mask_rcnn {

struct AnchorGeneratorOptions {
  // Per level, the anchor sizes (sqrt of the area, pixels): Mask R-CNN's FPN uses one per level.
  TORCH_ARG(std::vector<std::vector<double>>, sizes) = {{32}, {64}, {128}, {256}, {512}};
  // Per level (or one list for every level), height / width ratios.
  TORCH_ARG(std::vector<std::vector<double>>, aspect_ratios) = {{0.5, 1.0, 2.0}};
};

class AnchorGenerator {
 public:
  // Throws c10::Error when aspect_ratios has neither one entry nor one per level.
  explicit AnchorGenerator(AnchorGeneratorOptions options = {});

  int64_t NumLevels() const;
  // Anchors per feature-map location of `level` (sizes x aspect ratios).
  int64_t NumAnchorsPerLocation(int64_t level) const;

  // The anchors of a batch padded to batch_height x batch_width with these feature maps (one
  // per level, [N, C, H_l, W_l]): [sum_l H_l * W_l * A_l, 4] x1, y1, x2, y2, level by level,
  // location by location (row-major), the A_l anchors of a location together. The same for
  // every image of the batch; on the features' device, in their dtype when it is float or double
  // (as torchvision), float for half and bfloat16 features (too few mantissa bits for pixels).
  at::Tensor Anchors(int64_t batch_height, int64_t batch_width,
                     const std::vector<at::Tensor>& features) const;

  // The A_l cell anchors of `level` centred on the origin, [A_l, 4].
  at::Tensor CellAnchors(int64_t level) const;

 private:
  AnchorGeneratorOptions options_;
  std::vector<at::Tensor> cell_anchors_;
};

}  // namespace vision::models::mask_rcnn

#endif  // VISION_MODELS_MASK_RCNN_ANCHOR_GENERATOR_H_
