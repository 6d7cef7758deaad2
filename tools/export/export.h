// A trained model's weights in a reference implementation's own state-dict layout, for the
// export tool (export_main.cc): read a checkpoint's live or EMA weights into the config's model,
// take its state dict, rename it to the layout's keys.
//
// Layouts:
//  - "native": this project's keys, unchanged (every model).
//  - "torchvision": torchvision's maskrcnn_resnet50_fpn keys (MaskRCNN only), loadable into
//    torchvision.models.detection.maskrcnn_resnet50_fpn with load_state_dict(strict=True) and
//    back into MaskRCNN through MaskRCNNOptions.weights_path.
//  - "mhliao_db": MhLiao/DB's DBNet keys (DBNet only): its SegDetectorModel's state dict
//    ("model.module.backbone.*", "model.module.decoder.*"), which its demo.py and eval.py load
//    with strict=False; its ResNet's unused fc and smooth layers have no counterpart. Its
//    ResNet has deformable convolutions in all of layer2..layer4 or none: another pattern is
//    refused. A deformable Bottleneck ResNet gets a note: DB's computes the offsets of its
//    stride-2 blocks differently (its issue #250), so the outputs differ there.
//  - "junfu1115_danet": the DANet authors' keys (DANet only; junfu1115/DANet c7a2f60):
//    "pretrained.*" (the dilated ResNet) and "head.*"; its ResNet's unused fc has no
//    counterpart, and a model with an auxiliary head is refused (theirs has none). Notes say
//    how dilations map, and where the authors' code builds no such network (a BasicBlock
//    ResNet, whose dilated conv2 differs from ours; a head other than theirs).
// tools/export/export_authors_interop_test loads both into the authors' module structures and
// compares their outputs with ours.
//  - "torchvision_resnet": the model's ResNet backbone alone with torchvision.models.resnet*
//    keys (conv1, bn1, layer1..layer4); torchvision's classifier (fc) has no counterpart.
// FrozenBatchNorm2d has no num_batches_tracked; the torchvision layouts add it as 0 so that
// BatchNorm2d loads strictly (FrozenBatchNorm2d and this project's importer ignore it).
#ifndef VISION_TOOLS_EXPORT_EXPORT_H_
#define VISION_TOOLS_EXPORT_EXPORT_H_

#include <torch/nn/module.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/backbones/torchvision_import.h"

namespace vision::tools::export_tool {

// Parameters and buffers in PyTorch's state_dict() order (each module's own parameters, then
// its buffers, then its children's), detached tensors sharing storage with the module.
models::backbones::StateDict ModuleStateDict(const torch::nn::Module& module);

// The layouts `model_type` (a registered model name, e.g. "MaskRCNN") can be exported in.
std::vector<std::string> LayoutsFor(const std::string& model_type);

// OK when `model_type` can be exported in `layout`; else an InvalidArgument error naming the
// model's layouts.
absl::Status CheckLayout(const std::string& model_type, const std::string& layout);

struct Exported {
  models::backbones::StateDict state;
  // For people: what a user of the file should know (e.g. "fc.weight, fc.bias absent: ...").
  std::vector<std::string> notes;
};

// `state` (ModuleStateDict of a `model_type`) in `layout`. Errors: CheckLayout's, and a state
// the layout cannot represent (a deformable ResNet in torchvision's ResNet), naming the keys.
absl::StatusOr<Exported> ToLayout(const std::string& model_type, const std::string& layout,
                                  const models::backbones::StateDict& state);

enum class WeightsChoice { kDefault, kEma, kModel };

struct CheckpointWeights {
  bool ema = false;  // the EMA weights were loaded (else the live ones)
  bool checkpoint_has_ema = false;
  int64_t step = 0;
};

// Loads a trainer checkpoint's (engine/checkpoint.h) model weights into `model`, which the
// checkpoint's config built: kDefault takes the EMA weights when the checkpoint holds them, else
// the live ones. A checkpoint of another model (a tensor missing or of another shape), an
// unreadable file and kEma without EMA weights are errors naming the file and what to do.
absl::StatusOr<CheckpointWeights> LoadCheckpointWeights(const std::string& path,
                                                        torch::nn::Module& model,
                                                        const std::string& model_type,
                                                        WeightsChoice choice);

}  // namespace vision::tools::export_tool

#endif  // VISION_TOOLS_EXPORT_EXPORT_H_
