// The feature pyramid network (Lin et al., CVPR 2017) between a backbone and a model's heads,
// as torchvision's FeaturePyramidNetwork computes it:
//  - a 1x1 lateral convolution to inner_channels on each backbone level (C2..C5 of a ResNet);
//  - a top-down pathway from the coarsest level: each merged map is upsampled (nearest) to the
//    next finer level's exact size and added to that level's lateral, so input sizes need not
//    divide by the strides;
//  - a 3x3 convolution (padding 1) to out_channels on each merged map: P2..P5;
//  - optionally one coarser level, max_pool2d(P_top, kernel 1, stride 2): torchvision's
//    LastLevelMaxPool, the P6 that Mask R-CNN's RPN puts its largest anchors on.
// Parameters are lateral<i>.{weight,bias} and smooth<i>.{weight,bias}, level i finest first
// (the names DBNet's checkpoints have). torchvision's state dicts call them
// inner_blocks.<i>.0 and layer_blocks.<i>.0: rename those keys to import its weights.
#ifndef VISION_MODELS_NECKS_FPN_H_
#define VISION_MODELS_NECKS_FPN_H_

#include <cstdint>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

#include "models/ops/winograd_conv.h"

namespace vision::models::necks {

struct FpnOptions {
  // The laterals and the outputs both get `out_channels`, as in torchvision and Mask R-CNN.
  FpnOptions(std::vector<int64_t> in_channels, int64_t out_channels)
      : in_channels_(std::move(in_channels)),
        inner_channels_(out_channels),
        out_channels_(out_channels) {}
  // Channels of the backbone's levels, finest first.
  TORCH_ARG(std::vector<int64_t>, in_channels);
  // Channels of the laterals and the top-down pathway (DBNet: 4 * out_channels, since it
  // concatenates its four outputs).
  TORCH_ARG(int64_t, inner_channels);
  // Channels of every output level.
  TORCH_ARG(int64_t, out_channels);
  // Biases on every convolution (torchvision's FPN has them, DBNet's has none).
  TORCH_ARG(bool, bias) = true;
  // Appends the max-pooled level after the coarsest one (Mask R-CNN's P6).
  TORCH_ARG(bool, extra_max_pool_level) = false;
  // torchvision's initialisation: kaiming_uniform_(a = 1) weights, zero biases. Off keeps
  // LibTorch's default initialisation and draws no further random numbers, for models that
  // apply their reference's own scheme (DBNet), so a seed gives them the weights it always has.
  TORCH_ARG(bool, torchvision_init) = true;
};

class FpnImpl : public torch::nn::Module {
 public:
  explicit FpnImpl(FpnOptions options);

  // `features`, one per in_channels entry, finest first -> the pyramid, finest first, each
  // level [N, out_channels] at its input's size, then the extra level when configured.
  std::vector<at::Tensor> forward(const std::vector<at::Tensor>& features);

 private:
  FpnOptions options_;
  // ops::Conv2d: torch::nn::Conv2d, with Winograd for the 3x3 smoothing when
  // TrainPipelineConfig.cpu_convolution asks (models/ops/winograd_conv.h).
  std::vector<ops::Conv2d> laterals_;
  std::vector<ops::Conv2d> smooths_;
};
TORCH_MODULE(Fpn);

// `x` resized to `like`'s height and width by nearest neighbour: the top-down pathway's
// upsampling, for models that fuse the pyramid's levels further.
at::Tensor UpsampleNearestTo(const at::Tensor& x, const at::Tensor& like);

}  // namespace vision::models::necks

#endif  // VISION_MODELS_NECKS_FPN_H_
