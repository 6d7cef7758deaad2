#include "models/backbones/resnet.h"

#include <algorithm>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/nn/init.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/activation_checkpoint.h"
#include "core/batch_norm.h"
#include "core/backbone.h"
#include "core/status_macros.h"
#include "core/status_util.h"
#include "models/ops/deform_conv.h"
#include "models/ops/max_pool.h"
#include "models/ops/winograd_conv.h"
#include "models/backbones/frozen_batch_norm.h"
#include "models/backbones/resnet.pb.h"
#include "models/backbones/torchvision_import.h"

namespace vision::models::backbones {
namespace {

// ops::Conv2d: torch::nn::Conv2d that takes Winograd for its 3x3 stride-1 layers when
// TrainPipelineConfig.cpu_convolution asks (models/ops/winograd_conv.h).
ops::Conv2d Conv(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1,
                       int64_t padding = 0, int64_t dilation = 1) {
  return ops::Conv2d(torch::nn::Conv2dOptions(in, out, kernel)
                               .stride(stride)
                               .padding(padding)
                               .dilation(dilation)
                               .bias(false));
}

// The 3x3 convolution that stage_with_dcn turns into a modulated deformable one (mmdet's
// build_conv_layer with dcn=dict(type='DCNv2'), no bias either way).
torch::nn::AnyModule Conv3x3(int64_t in, int64_t out, int64_t stride, int64_t dilation,
                             bool deformable) {
  if (!deformable) return torch::nn::AnyModule(Conv(in, out, 3, stride, dilation, dilation));
  return torch::nn::AnyModule(ops::DeformConv2d(ops::DeformConv2dOptions(in, out, 3)
                                               .stride(stride)
                                               .padding(dilation)
                                               .dilation(dilation)
                                               .bias(false)));
}

torch::nn::AnyModule Norm(int64_t channels, bool frozen) {
  if (frozen) return torch::nn::AnyModule(FrozenBatchNorm2d(channels));
  // core::BatchNorm2d: SyncBatchNorm attaches to it (distributed/sync_batchnorm).
  return torch::nn::AnyModule(core::BatchNorm2d(channels));
}

// Submodules are registered in torchvision's order so that named_parameters() lists keys in
// the order of its state_dict().
class BasicBlockImpl : public torch::nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;

  // Unlike torchvision, which refuses dilation here, the first 3x3 convolution takes it
  // (mmseg's BasicBlock), so ResNet18/34 also serve output strides 16 and 8. `deformable`
  // makes the second one a DCN, as DB's deformable ResNet-18 (mmdet has no BasicBlock DCN).
  BasicBlockImpl(int64_t in_planes, int64_t planes, int64_t stride, int64_t dilation,
                 torch::nn::Sequential downsample, bool frozen_bn, bool deformable)
      : conv1_(register_module("conv1", Conv(in_planes, planes, 3, stride, dilation, dilation))),
        bn1_(Norm(planes, frozen_bn)),
        conv2_(Conv3x3(planes, planes, 1, 1, deformable)),
        bn2_(Norm(planes, frozen_bn)),
        downsample_(std::move(downsample)) {
    register_module("bn1", bn1_.ptr());
    register_module("conv2", conv2_.ptr());
    register_module("bn2", bn2_.ptr());
    if (downsample_) register_module("downsample", downsample_);
  }

  at::Tensor forward(const at::Tensor& x) {
    at::Tensor out = bn1_.forward(conv1_->forward(x)).relu_();
    out = bn2_.forward(conv2_.forward(out));
    out += downsample_ ? downsample_->forward(x) : x;
    return out.relu_();
  }

 private:
  ops::Conv2d conv1_;
  torch::nn::AnyModule bn1_;
  torch::nn::AnyModule conv2_;
  torch::nn::AnyModule bn2_;
  torch::nn::Sequential downsample_;
};
TORCH_MODULE(BasicBlock);

class BottleneckImpl : public torch::nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;

  // v1.5: the stride is on the 3x3 convolution, not on the first 1x1; `deformable` makes
  // that convolution a DCN (mmdet's Bottleneck with dcn).
  BottleneckImpl(int64_t in_planes, int64_t planes, int64_t stride, int64_t dilation,
                 torch::nn::Sequential downsample, bool frozen_bn, bool deformable)
      : conv1_(register_module("conv1", Conv(in_planes, planes, 1))),
        bn1_(Norm(planes, frozen_bn)),
        conv2_(Conv3x3(planes, planes, stride, dilation, deformable)),
        bn2_(Norm(planes, frozen_bn)),
        conv3_(Conv(planes, planes * kExpansion, 1)),
        bn3_(Norm(planes * kExpansion, frozen_bn)),
        downsample_(std::move(downsample)) {
    register_module("bn1", bn1_.ptr());
    register_module("conv2", conv2_.ptr());
    register_module("bn2", bn2_.ptr());
    register_module("conv3", conv3_);
    register_module("bn3", bn3_.ptr());
    if (downsample_) register_module("downsample", downsample_);
  }

  at::Tensor forward(const at::Tensor& x) {
    at::Tensor out = bn1_.forward(conv1_->forward(x)).relu_();
    out = bn2_.forward(conv2_.forward(out)).relu_();
    out = bn3_.forward(conv3_->forward(out));
    out += downsample_ ? downsample_->forward(x) : x;
    return out.relu_();
  }

 private:
  ops::Conv2d conv1_;
  torch::nn::AnyModule bn1_;
  torch::nn::AnyModule conv2_;
  torch::nn::AnyModule bn2_;
  ops::Conv2d conv3_;
  torch::nn::AnyModule bn3_;
  torch::nn::Sequential downsample_;
};
TORCH_MODULE(Bottleneck);

std::vector<int64_t> BlocksPerStage(int64_t depth) {
  switch (depth) {
    case 18: return {2, 2, 2, 2};
    case 34: return {3, 4, 6, 3};
    case 50: return {3, 4, 6, 3};
    case 101: return {3, 4, 23, 3};
    default: return {};
  }
}

absl::Status ValidateConfig(const ResNetConfig& config) {
  if (BlocksPerStage(config.depth()).empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ResNet depth ", config.depth(), " is not supported; use 18, 34, 50 or 101"));
  }
  if (config.frozen_stages() < -1 || config.frozen_stages() > 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("frozen_stages: ", config.frozen_stages(),
                     " is out of range; use -1 (none), 0 (stem) or 1..4 (stem and layer1..i)"));
  }
  if (config.output_stride() != 32 && config.output_stride() != 16 &&
      config.output_stride() != 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        "output_stride: ", config.output_stride(), " is not supported; use 32, 16 or 8"));
  }
  if (!config.stage_with_dcn().empty() && config.stage_with_dcn().size() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage_with_dcn: has ", config.stage_with_dcn().size(),
                     " entries; give none or one per stage layer1..layer4, e.g. [false, true, "
                     "true, true]"));
  }
  const std::vector<int64_t>& grid = config.multi_grid();
  const int64_t layer4_blocks = BlocksPerStage(config.depth())[3];
  if (!grid.empty() && static_cast<int64_t>(grid.size()) != layer4_blocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "multi_grid: has ", grid.size(), " entries but ResNet", config.depth(), "'s layer4 has ",
        layer4_blocks, " blocks; give one multiplier per block (e.g. ",
        layer4_blocks == 3 ? "[1, 2, 4]" : "[1, 2]", ") or none"));
  }
  for (size_t i = 0; i < grid.size(); ++i) {
    if (grid[i] < 1) {
      return absl::InvalidArgumentError(absl::StrCat("multi_grid[", i, "]: ", grid[i],
                                                     " is not a dilation multiplier; use >= 1"));
    }
  }
  return absl::OkStatus();
}

// Loads a torchvision checkpoint. Those are classifiers: their fc.* keys are dropped (and
// reported as ignored) because the backbone has no head, so strict loading still applies to
// everything else. Deformable convolutions' offset branches are new parameters: a plain
// checkpoint lacks them and they keep their zero initialisation, even when strict.
absl::Status LoadWeights(const std::string& name, const ResNetOptions& options, ResNet& net) {
  const std::string& path = options.weights_path();
  const std::string context = absl::StrCat(name, " weights_path");
  VISION_ASSIGN_OR_RETURN(const StateDict state,
                          core::WithContext(context, ReadTorchStateDict(path)));
  StateDict backbone_state;
  std::vector<std::string> classifier;
  for (const auto& [key, tensor] : state) {
    if (absl::StartsWith(key, "fc.")) {
      classifier.push_back(key);
    } else {
      backbone_state.emplace_back(key, tensor);
    }
  }
  VISION_ASSIGN_OR_RETURN(
      ImportReport report,
      core::WithContext(context, LoadStateDict(backbone_state, net, options.strict_weights(),
                                               absl::StrCat("weights file '", path, "'"),
                                               ops::OffsetBranchParameterNames(net))));
  report.ignored.insert(report.ignored.end(), classifier.begin(), classifier.end());
  if (!report.complete()) {
    TORCH_WARN(name, " loaded '", path, "' partially (strict_weights is off): ", report.ToString());
  }
  return absl::OkStatus();
}

// The registry needs one class per name; the depth is the only difference.
template <int64_t kDepth>
class RegisteredResNet final : public ResNet {
 public:
  using ResNet::ResNet;

  static absl::StatusOr<std::unique_ptr<RegisteredResNet>> Create(const ResNetOptions& options) {
    const std::string name = absl::StrCat("ResNet", kDepth);
    ResNetConfig config(kDepth);
    config.frozen_stages(options.frozen_stages())
        .frozen_batchnorm(options.frozen_batchnorm())
        .output_stride(options.output_stride())
        .stage_with_dcn({options.stage_with_dcn().begin(), options.stage_with_dcn().end()})
        .multi_grid({options.multi_grid().begin(), options.multi_grid().end()});
    VISION_RETURN_IF_ERROR(
        core::WithContext(absl::StrCat(name, " options"), ValidateConfig(config)));
    std::unique_ptr<RegisteredResNet> net;
    try {
      net = std::make_unique<RegisteredResNet>(config);
    } catch (const c10::Error& e) {
      return absl::InternalError(
          absl::StrCat("building ", name, " failed: ", e.what_without_backtrace()));
    }
    if (options.has_weights_path()) {
      VISION_RETURN_IF_ERROR(LoadWeights(name, options, *net));
    }
    return net;
  }
};

}  // namespace

ResNet::ResNet(const ResNetConfig& config) : config_(config), bottleneck_(config.depth() >= 50) {
  const absl::Status valid = ValidateConfig(config);
  TORCH_CHECK(valid.ok(), std::string(valid.message()));
  const bool frozen_bn = config_.frozen_batchnorm();
  conv1_ = register_module("conv1", Conv(3, 64, 7, 2, 3));
  bn1_ = Norm(64, frozen_bn);
  register_module("bn1", bn1_.ptr());

  const std::vector<int64_t> blocks = BlocksPerStage(config_.depth());
  const int64_t os = config_.output_stride();
  const bool dilate[4] = {false, false, os == 8, os <= 16};
  const std::vector<bool>& dcn = config_.stage_with_dcn();
  int64_t stride = 4;
  for (int i = 0; i < 4; ++i) {
    if (i > 0 && !dilate[i]) stride *= 2;
    strides_.push_back(stride);
    layers_.push_back(register_module(
        absl::StrCat("layer", i + 1),
        MakeStage(int64_t{64} << i, blocks[i], i == 0 ? 1 : 2, dilate[i], !dcn.empty() && dcn[i],
                  i == 3 ? config_.multi_grid() : std::vector<int64_t>{})));
  }
  ResetParameters();
  Freeze();
}

torch::nn::Sequential ResNet::MakeStage(int64_t planes, int64_t blocks, int64_t stride, bool dilate,
                                        bool deformable, const std::vector<int64_t>& multi_grid) {
  const bool frozen_bn = config_.frozen_batchnorm();
  const int64_t expansion = bottleneck_ ? BottleneckImpl::kExpansion : BasicBlockImpl::kExpansion;
  const int64_t previous_dilation = dilation_;
  if (dilate) {
    dilation_ *= stride;
    stride = 1;
  }
  torch::nn::Sequential downsample{nullptr};
  if (stride != 1 || in_planes_ != planes * expansion) {
    downsample = torch::nn::Sequential();
    downsample->push_back(Conv(in_planes_, planes * expansion, 1, stride));
    downsample->push_back(Norm(planes * expansion, frozen_bn));
  }
  torch::nn::Sequential stage;
  const auto add_block = [&](int64_t block_stride, int64_t dilation,
                             torch::nn::Sequential block_downsample) {
    if (bottleneck_) {
      stage->push_back(Bottleneck(in_planes_, planes, block_stride, dilation,
                                  std::move(block_downsample), frozen_bn, deformable));
    } else {
      stage->push_back(BasicBlock(in_planes_, planes, block_stride, dilation,
                                  std::move(block_downsample), frozen_bn, deformable));
    }
    in_planes_ = planes * expansion;
  };
  if (!multi_grid.empty()) {
    // Multi-grid (DeepLabv3, DANet's authors): every block, the first included, scales the
    // stage's dilation by its own multiplier.
    add_block(stride, dilation_ * multi_grid[0], std::move(downsample));
    for (int64_t b = 1; b < blocks; ++b) {
      add_block(1, dilation_ * multi_grid[b], torch::nn::Sequential{nullptr});
    }
    return stage;
  }
  // As torchvision: the first block keeps the previous dilation, the rest use the new one.
  add_block(stride, previous_dilation, std::move(downsample));
  for (int64_t b = 1; b < blocks; ++b) add_block(1, dilation_, torch::nn::Sequential{nullptr});
  return stage;
}

void ResNet::ResetParameters() {
  // torchvision: Kaiming-normal convolutions (fan_out, ReLU); norms start as the identity,
  // which their constructors already do. As mmdet, deformable convolutions' offset branches
  // are zeroed after that pass, so each DCN starts as its plain convolution (times 0.5).
  std::vector<ops::DeformConv2dImpl*> deformable;
  for (const std::shared_ptr<torch::nn::Module>& module : modules(/*include_self=*/false)) {
    if (auto* conv = dynamic_cast<torch::nn::Conv2dImpl*>(module.get())) {
      torch::nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
    } else if (auto* deform = dynamic_cast<ops::DeformConv2dImpl*>(module.get())) {
      torch::nn::init::kaiming_normal_(deform->weight, 0.0, torch::kFanOut, torch::kReLU);
      deformable.push_back(deform);
    }
  }
  for (ops::DeformConv2dImpl* deform : deformable) deform->ResetOffsetBranch();
}

void ResNet::Freeze() {
  const int64_t frozen = config_.frozen_stages();
  if (frozen < 0) return;
  const auto freeze = [](torch::nn::Module& module) {
    for (at::Tensor& parameter : module.parameters()) parameter.requires_grad_(false);
  };
  freeze(*conv1_);
  freeze(*bn1_.ptr());
  for (int64_t i = 0; i < frozen; ++i) freeze(*layers_[i]);
  train(is_training());
}

void ResNet::train(bool on) {
  torch::nn::Module::train(on);
  const int64_t frozen = config_.frozen_stages();
  if (frozen < 0) return;
  // Frozen stages must not update BatchNorm statistics either.
  bn1_.ptr()->eval();
  for (int64_t i = 0; i < frozen; ++i) layers_[i]->eval();
}

namespace {
const std::vector<std::string> kStageNames = {"layer1", "layer2", "layer3", "layer4"};
}  // namespace

std::vector<at::Tensor> ResNet::Forward(const at::Tensor& images) {
  // torchvision's stem is conv1, bn1, ReLU, 3x3 stride-2 max pool. Max pooling commutes with
  // ReLU (both monotone; a window whose maximum is <= 0 passes no gradient either way), so the
  // ReLU runs after the pool on a quarter of the elements, and the pool is ops::StemMaxPool
  // (ATen's outputs and indices, a faster CPU loop): the same outputs and gradients bit for bit
  // (resnet_test's StemPoolsBeforeReLUAsTorchvisionOrderDoes).
  at::Tensor x = ops::StemMaxPool(bn1_.forward(conv1_->forward(images))).relu_();
  std::vector<at::Tensor> outputs;
  outputs.reserve(layers_.size());
  for (size_t i = 0; i < layers_.size(); ++i) {
    torch::nn::Sequential& layer = layers_[i];
    x = checkpointed_[i] ? core::CheckpointedForward(
                               layer.ptr(), [&layer](const at::Tensor& t) { return layer->forward(t); }, x)
                         : layer->forward(x);
    outputs.push_back(x);
  }
  return outputs;
}

absl::Status ResNet::EnableActivationCheckpointing(const std::vector<std::string>& submodules) {
  for (const std::string& name : submodules) {
    const auto it = std::find(kStageNames.begin(), kStageNames.end(), name);
    if (it == kStageNames.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "activation checkpointing: ResNet has no stage '", name, "' (layer1..layer4)"));
    }
    checkpointed_[it - kStageNames.begin()] = true;
  }
  return absl::OkStatus();
}

std::vector<int64_t> ResNet::OutChannels() const {
  const int64_t expansion = bottleneck_ ? BottleneckImpl::kExpansion : BasicBlockImpl::kExpansion;
  return {64 * expansion, 128 * expansion, 256 * expansion, 512 * expansion};
}

std::vector<int64_t> ResNet::Strides() const { return strides_; }

absl::StatusOr<std::unique_ptr<ResNet>> MakeResNet(const ResNetConfig& config) {
  VISION_RETURN_IF_ERROR(ValidateConfig(config));
  try {
    return std::make_unique<ResNet>(config);
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("building ResNet", config.depth(), " failed: ", e.what_without_backtrace()));
  }
}

VISION_REGISTER_PLUGIN(core::BackboneRegistry, "ResNet18", RegisteredResNet<18>, ResNetOptions);
VISION_REGISTER_PLUGIN(core::BackboneRegistry, "ResNet34", RegisteredResNet<34>, ResNetOptions);
VISION_REGISTER_PLUGIN(core::BackboneRegistry, "ResNet50", RegisteredResNet<50>, ResNetOptions);
VISION_REGISTER_PLUGIN(core::BackboneRegistry, "ResNet101", RegisteredResNet<101>, ResNetOptions);

}  // namespace vision::models::backbones
