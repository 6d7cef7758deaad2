// ResNet-18/34/50/101 backbones in torchvision's layout (v1.5: the stride sits on the 3x3
// convolution), so torchvision state dicts load key for key, with optional modulated
// deformable convolutions (DCNv2, models/ops/deform_conv.h) in chosen stages. Registered in the
// BackboneRegistry as "ResNet18", "ResNet34", "ResNet50" and "ResNet101" with ResNetOptions
// (resnet.proto); ResNetConfig builds the same modules without protobuf.
#ifndef VISION_MODELS_BACKBONES_RESNET_H_
#define VISION_MODELS_BACKBONES_RESNET_H_

#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/ATen.h>
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

#include "absl/status/statusor.h"
#include "core/backbone.h"
#include "models/ops/winograd_conv.h"

namespace vision::models::backbones {

struct ResNetConfig {
  explicit ResNetConfig(int64_t depth) : depth_(depth) {}
  // 18, 34 (BasicBlock), 50 or 101 (Bottleneck).
  TORCH_ARG(int64_t, depth);
  // -1: none; 0: the stem; i: the stem and layer1..layer<i>. Frozen parameters do not
  // require grad and frozen stages stay in eval mode.
  TORCH_ARG(int64_t, frozen_stages) = -1;
  // FrozenBatchNorm2d instead of BatchNorm2d everywhere.
  TORCH_ARG(bool, frozen_batchnorm) = false;
  // 32, 16 (layer4 dilated) or 8 (layer3 and layer4 dilated).
  TORCH_ARG(int64_t, output_stride) = 32;
  // Empty, or one flag per stage layer1..layer4 (mmdet's stage_with_dcn): true makes the
  // 3x3 convolution conv2 of every block in that stage a DeformConv2d, whose weight keeps the
  // plain convolution's name and whose offset branch is new (OffsetBranchParameterNames).
  TORCH_ARG(std::vector<bool>, stage_with_dcn);
  // Empty, or one multiplier per block of layer4 (DeepLabv3's multi-grid, as DANet's
  // authors use it): block i's 3x3 convolution gets layer4's dilation times multi_grid[i],
  // the first block included. At output stride 8, {1, 2, 4} gives dilations 4, 8, 16.
  TORCH_ARG(std::vector<int64_t>, multi_grid);
};

class ResNet : public core::Backbone {
 public:
  // Throws c10::Error on an invalid config; MakeResNet returns a status instead.
  explicit ResNet(const ResNetConfig& config);

  // Outputs of layer1..layer4.
  std::vector<at::Tensor> Forward(const at::Tensor& images) override;
  std::vector<int64_t> OutChannels() const override;
  std::vector<int64_t> Strides() const override;

  // Keeps frozen stages in eval mode whatever `on` says (as mmdet's ResNet.train).
  void train(bool on = true) override;

  // Supports the stages "layer1".."layer4".
  absl::Status EnableActivationCheckpointing(const std::vector<std::string>& submodules) override;

  const ResNetConfig& config() const { return config_; }

 private:
  torch::nn::Sequential MakeStage(int64_t planes, int64_t blocks, int64_t stride, bool dilate,
                                  bool deformable, const std::vector<int64_t>& multi_grid);
  void ResetParameters();
  void Freeze();

  ResNetConfig config_;
  bool bottleneck_;
  int64_t in_planes_ = 64;
  int64_t dilation_ = 1;
  std::vector<int64_t> strides_;

  ops::Conv2d conv1_{nullptr};
  torch::nn::AnyModule bn1_;
  std::vector<torch::nn::Sequential> layers_;
  std::vector<bool> checkpointed_ = std::vector<bool>(4, false);
};

// Validates `config` and builds the module.
absl::StatusOr<std::unique_ptr<ResNet>> MakeResNet(const ResNetConfig& config);

}  // namespace vision::models::backbones

#endif  // VISION_MODELS_BACKBONES_RESNET_H_
