#include "tools/plugin_targets.h"

#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/registry.h"
#include "google/protobuf/descriptor.h"

namespace vision::tools {

const std::vector<PluginTarget>& PluginTargets() {
  static const auto* targets = new std::vector<PluginTarget>{
      {"model", "DBNet", "vision.models.dbnet.DBNetOptions", "//models/dbnet"},
      {"model", "MaskRCNN", "vision.models.mask_rcnn.MaskRCNNOptions", "//models/mask_rcnn"},
      {"model", "DANet", "vision.models.danet.DANetOptions", "//models/danet"},
      {"backbone", "ResNet18", "vision.models.backbones.ResNetOptions",
       "//models/backbones:resnet"},
      {"backbone", "ResNet34", "vision.models.backbones.ResNetOptions",
       "//models/backbones:resnet"},
      {"backbone", "ResNet50", "vision.models.backbones.ResNetOptions",
       "//models/backbones:resnet"},
      {"backbone", "ResNet101", "vision.models.backbones.ResNetOptions",
       "//models/backbones:resnet"},
      {"dataset", "COCO", "vision.data.datasets.CocoOptions", "//data/datasets/coco"},
      {"dataset", "Cityscapes", "vision.data.datasets.CityscapesOptions",
       "//data/datasets/cityscapes"},
      {"dataset", "ICDAR2015", "vision.data.datasets.ICDAR2015Options",
       "//data/datasets/icdar2015"},
      {"dataset", "ImageFolder", "vision.data.datasets.image_folder.ImageFolderOptions",
       "//data/datasets/image_folder"},
      {"augmentation", "ColorJitter", "vision.data.augmentations.ColorJitterOptions",
       "//data/augmentations:color_jitter"},
      {"augmentation", "HorizontalFlip", "vision.data.augmentations.HorizontalFlipOptions",
       "//data/augmentations:horizontal_flip"},
      {"augmentation", "Normalize", "vision.data.augmentations.NormalizeOptions",
       "//data/augmentations:normalize"},
      {"augmentation", "PadToDivisor", "vision.data.augmentations.PadToDivisorOptions",
       "//data/augmentations:pad_to_divisor"},
      {"augmentation", "RandomCrop", "vision.data.augmentations.RandomCropOptions",
       "//data/augmentations:random_crop"},
      {"augmentation", "RandomRotate", "vision.data.augmentations.RandomRotateOptions",
       "//data/augmentations:random_rotate"},
      {"augmentation", "RandomScale", "vision.data.augmentations.RandomScaleOptions",
       "//data/augmentations:random_scale"},
      {"augmentation", "Resize", "vision.data.augmentations.ResizeOptions",
       "//data/augmentations:resize"},
      {"optimizer", "SGD", "vision.engine.optim.SgdOptions", "//engine/optim:optimizers"},
      {"optimizer", "Adam", "vision.engine.optim.AdamOptions", "//engine/optim:optimizers"},
      {"optimizer", "AdamW", "vision.engine.optim.AdamOptions", "//engine/optim:optimizers"},
      {"lr_schedule", "Constant", "vision.engine.schedules.ConstantOptions", "//engine/schedules"},
      {"lr_schedule", "Cosine", "vision.engine.schedules.CosineOptions", "//engine/schedules"},
      {"lr_schedule", "MultiStep", "vision.engine.schedules.MultiStepOptions",
       "//engine/schedules"},
      {"lr_schedule", "Poly", "vision.engine.schedules.PolyOptions", "//engine/schedules"},
      {"comm_strategy", "allreduce", "vision.distributed.AllReduceOptions",
       "//distributed/strategies"},
      {"comm_strategy", "bucketed", "vision.distributed.BucketedOptions",
       "//distributed/strategies"},
      {"comm_strategy", "fp16_compress", "vision.distributed.BucketedOptions",
       "//distributed/strategies"},
      {"comm_strategy", "bf16_compress", "vision.distributed.BucketedOptions",
       "//distributed/strategies"},
      {"evaluator", "COCO", "vision.evaluation.CocoEvalOptions",
       "//evaluation/coco:coco_evaluator"},
      {"evaluator", "ICDAR2015Hmean", "vision.evaluation.ICDAR2015HmeanOptions",
       "//evaluation/icdar2015:icdar2015_evaluator"},
      {"evaluator", "SemanticSegmentation", "vision.evaluation.SemanticSegmentationOptions",
       "//evaluation/semantic_segmentation:semantic_segmentation_evaluator"},
      {"hook", "EarlyStopping", "vision.engine.hooks.EarlyStoppingOptions",
       "//engine/hooks:early_stopping"},
  };
  return *targets;
}

namespace {

std::string Hint(const PluginTarget& plugin, const std::string& target) {
  return absl::StrCat(plugin.family, " '", plugin.name, "' is not linked into ", target, ": add \"",
                      plugin.label, "\" to its deps");
}

}  // namespace

std::vector<std::string> MissingPluginHints(const std::string& config_text,
                                            const absl::Status& build_status,
                                            const std::string& target) {
  std::vector<std::string> hints;
  constexpr char kPrefix[] = "type.googleapis.com/";
  std::set<std::string> seen;
  for (size_t at = config_text.find(kPrefix); at != std::string::npos;
       at = config_text.find(kPrefix, at + 1)) {
    const size_t begin = at + sizeof(kPrefix) - 1;
    const size_t end = config_text.find(']', begin);
    if (end == std::string::npos) continue;
    const std::string type = config_text.substr(begin, end - begin);
    if (!seen.insert(type).second) continue;
    if (google::protobuf::DescriptorPool::generated_pool()->FindMessageTypeByName(type) !=
        nullptr) {
      continue;
    }
    // Several plugins may share an options type (ResNet18..101); any of them names the target.
    const PluginTarget* owner = nullptr;
    for (const PluginTarget& plugin : PluginTargets()) {
      if (type == plugin.options_type) {
        owner = &plugin;
        break;
      }
    }
    if (owner != nullptr) {
      hints.push_back(absl::StrCat("options type ", type, ": the ", Hint(*owner, target)));
    } else {
      hints.push_back(absl::StrCat(
          "options type ", type, " is not linked into ", target,
          " and no plugin of //tools:all_plugins declares it (tools/plugin_targets.cc): check "
          "its spelling, or add the target of the plugin whose options it is to the deps"));
    }
  }
  const std::optional<core::UnknownPlugin> missed = core::UnknownPluginOf(build_status);
  if (missed.has_value()) {
    const PluginTarget* owner = nullptr;
    for (const PluginTarget& plugin : PluginTargets()) {
      if (missed->family == plugin.family && missed->name == plugin.name) owner = &plugin;
    }
    if (owner != nullptr) {
      hints.push_back(Hint(*owner, target));
    } else {
      hints.push_back(absl::StrCat(
          missed->family, " '", missed->name, "' is not linked into ", target,
          " and no plugin of //tools:all_plugins registers it (tools/plugin_targets.cc): check "
          "its spelling (the registry's message above lists what is linked)"));
    }
  }
  return hints;
}

}  // namespace vision::tools
