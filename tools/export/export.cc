#include "tools/export/export.h"

#include <c10/util/Exception.h>
#include <google/protobuf/text_format.h>
#include <torch/serialize/input-archive.h>

#include <algorithm>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "core/config/pipeline.pb.h"
#include "core/status_macros.h"
#include "engine/checkpoint.h"
#include "models/mask_rcnn/mask_rcnn.h"

namespace vision::tools::export_tool {
namespace {

using models::backbones::StateDict;

void AppendState(const torch::nn::Module& module, const std::string& prefix, StateDict* state) {
  for (const auto& p : module.named_parameters(/*recurse=*/false)) {
    if (p.value().defined()) state->emplace_back(prefix + p.key(), p.value().detach());
  }
  for (const auto& b : module.named_buffers(/*recurse=*/false)) {
    if (b.value().defined()) state->emplace_back(prefix + b.key(), b.value().detach());
  }
  for (const auto& child : module.named_children()) {
    AppendState(*child.value(), prefix + child.key() + ".", state);
  }
}

// The first eight of `keys`, then how many more.
std::string FirstKeys(const std::vector<std::string>& keys) {
  const size_t shown = std::min<size_t>(keys.size(), 8);
  return absl::StrCat(
      absl::StrJoin(keys.begin(), keys.begin() + shown, ", "),
      keys.size() > shown ? absl::StrCat(" and ", keys.size() - shown, " more") : "");
}

// This project's Mask R-CNN key -> torchvision's, the inverse of FromTorchvisionKey.
std::string ToTorchvisionMaskRcnnKey(const std::string& key) {
  for (int i = 0; i < 8; ++i) {
    const std::pair<std::string, std::string> renames[] = {
        {absl::StrCat("backbone.fpn.lateral", i, "."),
         absl::StrCat("backbone.fpn.inner_blocks.", i, ".0.")},
        {absl::StrCat("backbone.fpn.smooth", i, "."),
         absl::StrCat("backbone.fpn.layer_blocks.", i, ".0.")},
        {absl::StrCat("roi_heads.mask_head.mask_fcn", i + 1, "."),
         absl::StrCat("roi_heads.mask_head.", i, ".0.")},
    };
    for (const auto& [ours, theirs] : renames) {
      if (absl::StartsWith(key, ours)) return theirs + key.substr(ours.size());
    }
  }
  if (absl::StartsWith(key, "rpn.head.conv.")) return "rpn.head.conv.0.0." + key.substr(14);
  return key;
}

// `state` with num_batches_tracked = 0 added after each BatchNorm-like "<m>.running_var" that
// lacks one (FrozenBatchNorm2d), so that `target`'s torch.nn.BatchNorm2d loads the file
// strictly; says so in a note when it added any.
Exported WithBatchesTracked(const StateDict& state, const std::string& target) {
  std::set<std::string> keys;
  for (const auto& [key, tensor] : state) keys.insert(key);
  Exported exported;
  size_t added = 0;
  for (const auto& [key, tensor] : state) {
    exported.state.emplace_back(key, tensor);
    if (!absl::EndsWith(key, ".running_var")) continue;
    const std::string tracked =
        key.substr(0, key.size() - std::string("running_var").size()) + "num_batches_tracked";
    if (keys.count(tracked) == 0) {
      exported.state.emplace_back(tracked, at::zeros({}, at::kLong));
      ++added;
    }
  }
  if (added > 0) {
    exported.notes.push_back(absl::StrCat(added,
                                          " num_batches_tracked buffers added as 0 "
                                          "(FrozenBatchNorm2d has none; ",
                                          target, "'s BatchNorm2d expects them)"));
  }
  return exported;
}

absl::StatusOr<Exported> TorchvisionMaskRcnn(const StateDict& state) {
  StateDict renamed;
  for (const auto& [key, tensor] : state) {
    const std::string theirs = ToTorchvisionMaskRcnnKey(key);
    // The importer's mapping must take it back, or the file would not load into this model.
    if (models::mask_rcnn::FromTorchvisionKey(theirs) != key) {
      return absl::InternalError(absl::StrCat("torchvision layout: '", key, "' maps to '", theirs,
                                              "', which the importer reads as '",
                                              models::mask_rcnn::FromTorchvisionKey(theirs), "'"));
    }
    renamed.emplace_back(theirs, tensor);
  }
  return WithBatchesTracked(renamed, "torchvision");
}

// This project's DBNet key -> MhLiao/DB's (its SegDetectorModel's state dict: BasicModel under
// DataParallel, backbone + SegDetector decoder); "" for a key it has no place for.
std::string ToMhLiaoDbKey(const std::string& key) {
  const std::string prefix = "model.module.";
  if (absl::StartsWith(key, "backbone.")) {
    // Their DCN predicts offsets and mask logits with a sibling convolution, conv2_offset,
    // where ours (mmcv's layout) has it inside the deformable convolution; the channels are
    // in the same order (18 offsets, then 9 mask logits).
    return prefix + absl::StrReplaceAll(key, {{".conv2.conv_offset.", ".conv2_offset."}});
  }
  for (int i = 0; i < 4; ++i) {
    const std::string lateral = absl::StrCat("neck.lateral", i, ".");
    if (absl::StartsWith(key, lateral)) {
      return absl::StrCat(prefix, "decoder.in", i + 2, ".", key.substr(lateral.size()));
    }
    const std::string smooth = absl::StrCat("neck.smooth", i, ".");
    if (absl::StartsWith(key, smooth)) {
      // out3..out5 are Sequential(conv, upsample); out2 is the convolution alone.
      return absl::StrCat(prefix, "decoder.out", i + 2, i == 0 ? "." : ".0.",
                          key.substr(smooth.size()));
    }
  }
  for (const auto& [ours, theirs] :
       {std::pair<std::string, std::string>{"head.probability.", "decoder.binarize."},
        {"head.threshold.", "decoder.thresh."}}) {
    if (absl::StartsWith(key, ours)) return prefix + theirs + key.substr(ours.size());
  }
  return "";
}

// The blocks of each ResNet stage under `prefix` ("layer2" -> {"layer2.0", "layer2.1"}), and
// those whose 3x3 convolution is deformable.
struct ResNetBlocks {
  std::map<std::string, std::set<std::string>> blocks;
  std::set<std::string> deformable;
  bool bottleneck = false;
};

ResNetBlocks ResNetBlocksOf(const StateDict& state, const std::string& prefix) {
  static const std::regex kBlock(
      "(layer[1-4])\\.([0-9]+)\\.(conv1\\.weight|conv3\\.weight|"
      "conv2\\.conv_offset\\.weight)");
  ResNetBlocks result;
  for (const auto& [key, tensor] : state) {
    std::smatch m;
    if (!absl::StartsWith(key, prefix)) continue;
    const std::string name = key.substr(prefix.size());
    if (!std::regex_match(name, m, kBlock)) continue;
    const std::string block = absl::StrCat(m[1].str(), ".", m[2].str());
    result.blocks[m[1].str()].insert(block);
    if (m[3].str() == "conv3.weight") result.bottleneck = true;
    if (m[3].str() == "conv2.conv_offset.weight") result.deformable.insert(block);
  }
  return result;
}

absl::StatusOr<Exported> MhLiaoDb(const StateDict& state) {
  // DB's ResNet hands its dcn argument to every block of layer2..layer4 (stage_with_dcn is
  // stored but never read): another pattern has no counterpart there, and strict=False would
  // load it silently into a network with zero offsets in the blocks that lack them.
  const ResNetBlocks resnet = ResNetBlocksOf(state, "backbone.");
  if (!resnet.deformable.empty()) {
    std::set<std::string> db_deformable;
    for (const char* stage : {"layer2", "layer3", "layer4"}) {
      const auto it = resnet.blocks.find(stage);
      if (it != resnet.blocks.end()) db_deformable.insert(it->second.begin(), it->second.end());
    }
    if (resnet.deformable != db_deformable) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layout 'mhliao_db': MhLiao/DB's ResNet has deformable convolutions in every block of "
          "layer2..layer4 or in none, and this model has them in ",
          absl::StrJoin(resnet.deformable, ", "),
          ": train with ResNetOptions.stage_with_dcn [false, true, true, true] or without it"));
    }
  }
  StateDict renamed;
  std::vector<std::string> foreign;
  for (const auto& [key, tensor] : state) {
    const std::string theirs = ToMhLiaoDbKey(key);
    if (theirs.empty()) {
      foreign.push_back(key);
    } else {
      renamed.emplace_back(theirs, tensor);
    }
  }
  if (!foreign.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layout 'mhliao_db': MhLiao/DB's SegDetectorModel has no place for: ", FirstKeys(foreign)));
  }
  Exported exported = WithBatchesTracked(renamed, "MhLiao/DB");
  exported.notes.push_back(
      "MhLiao/DB's ResNet also holds backbone.fc.* and backbone.smooth.*, which its forward never "
      "uses and this model lacks: load as its demo.py and eval.py do, "
      "model.load_state_dict(states, strict=False), and expect only those four missing");
  if (!resnet.deformable.empty() && resnet.bottleneck) {
    exported.notes.push_back(
        "MhLiao/DB's deformable Bottleneck predicts offsets at stride 1 in its three stride-2 "
        "blocks (layer2.0, layer3.0, layer4.0), whose CUDA kernel then reads the first rows of "
        "them (its issue #250), where this model predicts them at the convolution's stride: "
        "there the file computes other outputs than ours unless backbones/resnet.py's "
        "Bottleneck gives conv2_offset stride=stride, as that issue proposes "
        "(//tools/export:export_authors_interop_test measures both)");
  }
  return exported;
}

// torchvision's ResNet keys below the prefix (conv1, bn1, layer1..layer4; BatchNorm buffers).
bool IsTorchvisionResNetKey(const std::string& name) {
  static const std::regex kTorchvisionKey(
      "(conv1\\.weight|bn1\\.(weight|bias|running_mean|running_var|num_batches_tracked)|"
      "layer[1-4]\\.[0-9]+\\.(conv[1-3]\\.weight|downsample\\.0\\.weight|"
      "(bn[1-3]|downsample\\.1)\\.(weight|bias|running_mean|running_var|num_batches_tracked)))");
  return std::regex_match(name, kTorchvisionKey);
}

// The authors' DANet (junfu1115/DANet c7a2f60, encoding/models/danet.py): the dilated ResNet
// as BaseNet's "pretrained", DANetHead as "head" with this project's names; no auxiliary head.
absl::StatusOr<Exported> Junfu1115DaNet(const StateDict& state) {
  StateDict renamed;
  std::vector<std::string> foreign;
  for (const auto& [key, tensor] : state) {
    if (absl::StartsWith(key, "backbone.") && IsTorchvisionResNetKey(key.substr(9))) {
      renamed.emplace_back("pretrained." + key.substr(9), tensor);
    } else if (absl::StartsWith(key, "head.")) {
      renamed.emplace_back(key, tensor);
    } else {
      foreign.push_back(key);
    }
  }
  if (!foreign.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layout 'junfu1115_danet': the authors' DANet has no place for: ", FirstKeys(foreign),
        " (it has no auxiliary head: train with DANetOptions.aux false; its ResNet has no "
        "deformable convolutions)"));
  }
  Exported exported = WithBatchesTracked(renamed, "junfu1115/DANet");
  exported.notes.push_back(
      "the authors' dilated ResNet also holds pretrained.fc.weight and pretrained.fc.bias, "
      "which DANet's forward never uses and this model lacks: load with "
      "model.load_state_dict(sd, strict=False) and expect only those two missing; its "
      "experiments/segmentation/test.py reads torch.load(f)['state_dict'] (and ['epoch'])");
  exported.notes.push_back(
      "dilations are not weights: the authors' dilated=True ResNet is this model at "
      "output_stride 8, and this project's multi_grid [a, b, c] is their multi_grid=True, "
      "multi_dilation=[4a, 4b, 4c] (their Cityscapes recipe: 4, 8, 16)");
  if (!ResNetBlocksOf(state, "backbone.").bottleneck) {
    exported.notes.push_back(
        "the authors' DANet builds ResNet-50/101/152 only; the BasicBlock of their dilated "
        "resnet18/34 dilates conv2 as well as conv1, where this model (as mmseg) dilates conv1 "
        "only, so their resnet18/34 computes other features from these weights unless conv2 is "
        "built with dilation 1 (//tools/export:export_authors_interop_test measures both)");
  }
  std::map<std::string, at::Tensor> head;
  for (const auto& [key, tensor] : state) {
    if (absl::StartsWith(key, "head.")) head.emplace(key, tensor);
  }
  const auto conv5a = head.find("head.conv5a.0.weight");
  const auto query = head.find("head.sa.query_conv.weight");
  if (conv5a != head.end() && query != head.end()) {
    const int64_t inter = conv5a->second.size(0), in = conv5a->second.size(1);
    if (in != 2048 || inter != 512) {
      exported.notes.push_back(absl::StrCat(
          "the authors' DANet builds DANetHead(2048, nclass) (512 channels); this head takes ", in,
          " channels to ", inter, ": ",
          inter * 4 == in ? absl::StrCat("build DANetHead(", in, ", nclass) to load it")
                          : absl::StrCat("DANetHead takes in_channels / 4, so none of its "
                                         "instances can hold it (train with head_channels ",
                                         in / 4, ", or 0)")));
    }
    if (query->second.size(0) * 8 != inter) {
      exported.notes.push_back(absl::StrCat(
          "the authors' PAM_Module projects queries and keys to in_dim / 8 channels, this one to ",
          query->second.size(0), " of ", inter,
          ": it will not load there (train with attention_reduction 8)"));
    }
  }
  return exported;
}

// The ResNet inside a model: the prefix of its "conv1.weight" and "layer1.*" keys.
absl::StatusOr<std::string> ResNetPrefix(const std::string& model_type, const StateDict& state) {
  std::set<std::string> keys;
  for (const auto& [key, tensor] : state) keys.insert(key);
  for (const std::string prefix : {"backbone.body.", "backbone.", ""}) {
    if (keys.count(prefix + "conv1.weight") && keys.count(prefix + "layer1.0.conv1.weight")) {
      return prefix;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "layout 'torchvision_resnet': this ", model_type,
      " has no ResNet backbone with torchvision's key names (conv1, bn1, layer1..layer4)"));
}

absl::StatusOr<Exported> TorchvisionResNet(const std::string& model_type, const StateDict& state) {
  absl::StatusOr<std::string> prefix = ResNetPrefix(model_type, state);
  if (!prefix.ok()) return prefix.status();
  StateDict backbone;
  std::vector<std::string> foreign;
  for (const auto& [key, tensor] : state) {
    if (!absl::StartsWith(key, *prefix)) continue;
    const std::string name = key.substr(prefix->size());
    if (!IsTorchvisionResNetKey(name)) {
      foreign.push_back(key);
      continue;
    }
    backbone.emplace_back(name, tensor);
  }
  if (!foreign.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layout 'torchvision_resnet': the backbone has tensors torchvision's ResNet has no place "
        "for (a deformable convolution's offsets?): ",
        FirstKeys(foreign)));
  }
  Exported exported = WithBatchesTracked(backbone, "torchvision");
  exported.notes.insert(
      exported.notes.begin(),
      absl::StrCat("the ResNet under '", *prefix, "', renamed to torchvision.models.resnet* keys"));
  exported.notes.push_back(
      "fc.weight and fc.bias (torchvision's ImageNet classifier) are absent: this backbone has "
      "no classifier. Load with model.fc = torch.nn.Identity() before "
      "load_state_dict(strict=True), or with strict=False (missing: fc.weight, fc.bias)");
  return exported;
}

std::string Shape(const at::Tensor& t) {
  return absl::StrCat("[", absl::StrJoin(t.sizes(), ", "), "]");
}

// Reads `key` ("layer1.0.conv1.weight") from a Module::save archive, which nests one archive per
// submodule.
bool TryReadNested(torch::serialize::InputArchive& archive, const std::string& key,
                   at::Tensor* tensor) {
  const std::vector<std::string> parts = absl::StrSplit(key, '.');
  torch::serialize::InputArchive* current = &archive;
  std::vector<torch::serialize::InputArchive> nested(parts.size());
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (!current->try_read(parts[i], nested[i])) return false;
    current = &nested[i];
  }
  return current->try_read(parts.back(), *tensor);
}

// The model type of the run that wrote a checkpoint, from its recorded config ("" if unknown).
std::string RecordedModelType(const std::string& config_text) {
  core::TrainPipelineConfig config;
  google::protobuf::TextFormat::Parser parser;
  parser.AllowPartialMessage(true);
  parser.AllowUnknownField(true);
  parser.AllowUnknownExtension(true);
  if (config_text.empty() || !parser.ParseFromString(config_text, &config)) return "";
  return config.model().type();
}

}  // namespace

StateDict ModuleStateDict(const torch::nn::Module& module) {
  StateDict state;
  AppendState(module, "", &state);
  return state;
}

std::vector<std::string> LayoutsFor(const std::string& model_type) {
  if (model_type == "MaskRCNN") return {"native", "torchvision", "torchvision_resnet"};
  if (model_type == "DBNet") return {"native", "mhliao_db", "torchvision_resnet"};
  if (model_type == "DANet") return {"native", "junfu1115_danet", "torchvision_resnet"};
  return {"native", "torchvision_resnet"};
}

absl::Status CheckLayout(const std::string& model_type, const std::string& layout) {
  const std::vector<std::string> layouts = LayoutsFor(model_type);
  if (std::find(layouts.begin(), layouts.end(), layout) != layouts.end()) return absl::OkStatus();
  // Each whole-model layout belongs to one model type.
  const std::map<std::string, std::string> owners = {
      {"torchvision", "torchvision's Mask R-CNN, for a MaskRCNN model"},
      {"mhliao_db", "MhLiao/DB's DBNet, for a DBNet model"},
      {"junfu1115_danet", "the DANet authors' junfu1115/DANet, for a DANet model"},
  };
  const auto owner = owners.find(layout);
  const bool known = owner != owners.end() || layout == "native" || layout == "torchvision_resnet";
  return absl::InvalidArgumentError(absl::StrCat(
      known ? absl::StrCat("--layout=", layout, " is not supported for ", model_type)
            : absl::StrCat("unknown --layout '", layout, "'"),
      "; ", model_type, " can be exported as: ", absl::StrJoin(layouts, ", "),
      owner != owners.end() ? absl::StrCat(" ('", layout, "' is ", owner->second, ")") : ""));
}

absl::StatusOr<Exported> ToLayout(const std::string& model_type, const std::string& layout,
                                  const StateDict& state) {
  VISION_RETURN_IF_ERROR(CheckLayout(model_type, layout));
  if (layout == "native") return Exported{state, {}};
  if (layout == "torchvision") return TorchvisionMaskRcnn(state);
  if (layout == "mhliao_db") return MhLiaoDb(state);
  if (layout == "junfu1115_danet") return Junfu1115DaNet(state);
  return TorchvisionResNet(model_type, state);
}

absl::StatusOr<CheckpointWeights> LoadCheckpointWeights(const std::string& path,
                                                        torch::nn::Module& model,
                                                        const std::string& model_type,
                                                        WeightsChoice choice) {
  const std::string retrain_hint =
      "give --config the pipeline config the checkpoint was trained with";
  absl::StatusOr<engine::CheckpointMeta> meta = engine::ReadCheckpointMeta(path);
  if (!meta.ok()) {
    return absl::Status(meta.status().code(),
                        absl::StrCat(meta.status().message(),
                                     ". Give --checkpoint a checkpoint_N.pt or best.pt that "
                                     "//tools:train wrote"));
  }
  const std::string recorded = RecordedModelType(meta->config_text);
  if (!recorded.empty() && recorded != model_type) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint '", path, "' holds a ", recorded, " (its run's config), but the ",
                     "config builds a ", model_type, ": ", retrain_hint));
  }
  CheckpointWeights result;
  result.step = meta->step;
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    torch::serialize::InputArchive model_archive;
    if (!archive.try_read("model", model_archive)) {
      return absl::DataLossError(absl::StrCat("checkpoint '", path, "' holds no model weights"));
    }
    const StateDict own = ModuleStateDict(model);
    std::vector<std::string> missing, mismatched;
    std::vector<at::Tensor> live(own.size()), ema(own.size());
    size_t ema_found = 0;
    for (size_t i = 0; i < own.size(); ++i) {
      const auto& [key, tensor] = own[i];
      if (!TryReadNested(model_archive, key, &live[i])) {
        missing.push_back(key);
        continue;
      }
      if (live[i].sizes() != tensor.sizes()) {
        mismatched.push_back(
            absl::StrCat(key, ": checkpoint ", Shape(live[i]), ", model ", Shape(tensor)));
      }
      if (archive.try_read("ema/" + key, ema[i])) {
        ++ema_found;
        if (ema[i].sizes() != tensor.sizes()) {
          mismatched.push_back(
              absl::StrCat("ema/", key, ": checkpoint ", Shape(ema[i]), ", model ", Shape(tensor)));
        }
      }
    }
    if (!missing.empty() || !mismatched.empty()) {
      std::vector<std::string> problems = mismatched;
      for (const std::string& key : missing) problems.push_back(key + ": not in the checkpoint");
      const size_t shown = std::min<size_t>(problems.size(), 6);
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint '", path, "' does not hold the config's model (", model_type,
          "): ", missing.size(), " of its ", own.size(), " tensors missing, ", mismatched.size(),
          " of another shape (", absl::StrJoin(problems.begin(), problems.begin() + shown, "; "),
          problems.size() > shown ? "; ..." : "", "): ", retrain_hint));
    }
    if (ema_found != 0 && ema_found != own.size()) {
      return absl::DataLossError(absl::StrCat("checkpoint '", path, "' holds EMA values for ",
                                              ema_found, " of the model's ", own.size(),
                                              " tensors: corrupt, or written by another model"));
    }
    result.checkpoint_has_ema = ema_found == own.size();
    if (choice == WeightsChoice::kEma && !result.checkpoint_has_ema) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--weights=ema: checkpoint '", path,
          "' holds no EMA weights (its run had train.ema_decay 0); use --weights=model"));
    }
    result.ema = result.checkpoint_has_ema && choice != WeightsChoice::kModel;
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < own.size(); ++i) {
      own[i].second.copy_(result.ema ? ema[i] : live[i]);
    }
  } catch (const c10::Error& e) {
    return absl::DataLossError(
        absl::StrCat("cannot load checkpoint '", path, "': ", e.what_without_backtrace()));
  }
  return result;
}

}  // namespace vision::tools::export_tool
