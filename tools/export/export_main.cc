// Writes a trained checkpoint's weights as a torch.save state dict in a reference
// implementation's own layout, for use outside this project:
//   export --config=models/mask_rcnn/configs/coco_resnet50_fpn_1x.pbtxt
//          --checkpoint=runs/mask_rcnn/best.pt --layout=torchvision --output=mask_rcnn.pth
// The file loads with Python's torch.load(path, weights_only=True); for --layout=torchvision,
// into torchvision.models.detection.maskrcnn_resnet50_fpn(weights=None, weights_backbone=None,
// num_classes=K + 1) with load_state_dict(strict=True); for --layout=mhliao_db (DBNet), into
// MhLiao/DB's model as its demo.py loads (strict=False). Layouts: tools/export/export.h. The
// checkpoint's EMA weights are exported when it holds them, unless --weights=model.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/config/loader.h"
#include "core/pipeline_builder.h"
#include "core/status_macros.h"
#include "core/torch_guard.h"
#include "models/backbones/torch_save_writer.h"
#include "tools/export/export.h"
#include "tools/flags_util.h"

ABSL_FLAG(std::string, config, "", "Path of the pipeline config the checkpoint was trained with.");
ABSL_FLAG(std::string, checkpoint, "", "Checkpoint to export (checkpoint_N.pt or best.pt).");
ABSL_FLAG(std::string, layout, "",
          "Key layout of the output: native, torchvision (MaskRCNN: torchvision's "
          "maskrcnn_resnet50_fpn), mhliao_db (DBNet: MhLiao/DB's), junfu1115_danet (DANet: the "
          "authors') or torchvision_resnet (the ResNet backbone alone).");
ABSL_FLAG(std::string, output, "", "The .pth file to write (replaced if it exists).");
ABSL_FLAG(std::string, weights, "",
          "ema or model: which weights to export. Default: the EMA weights when the checkpoint "
          "holds them, else the live ones.");

namespace vision::tools {
namespace {

namespace fs = std::filesystem;

absl::Status Run(const std::vector<std::string>& overrides) {
  const std::string config_path = absl::GetFlag(FLAGS_config);
  const std::string checkpoint = absl::GetFlag(FLAGS_checkpoint);
  const std::string layout = absl::GetFlag(FLAGS_layout);
  const std::string output = absl::GetFlag(FLAGS_output);
  const std::string weights = absl::GetFlag(FLAGS_weights);
  for (const auto& [flag, value] : {std::pair{"--config", config_path},
                                    {"--checkpoint", checkpoint},
                                    {"--layout", layout},
                                    {"--output", output}}) {
    if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, " is required"));
  }
  export_tool::WeightsChoice choice = export_tool::WeightsChoice::kDefault;
  if (weights == "ema") {
    choice = export_tool::WeightsChoice::kEma;
  } else if (weights == "model") {
    choice = export_tool::WeightsChoice::kModel;
  } else if (!weights.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--weights='", weights, "': give ema or model (or leave it out)"));
  }
  VISION_ASSIGN_OR_RETURN(core::TrainPipelineConfig config,
                          core::LoadPipelineConfig(config_path, overrides));
  const std::string model_type = config.model().type();
  VISION_RETURN_IF_ERROR(export_tool::CheckLayout(model_type, layout));
  const fs::path parent = fs::path(output).parent_path();
  std::error_code ec;
  if (!parent.empty() && !fs::is_directory(parent, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--output='", output, "': '", parent.string(),
                     "' is not a directory; create it or name a file in an existing one"));
  }
  VISION_ASSIGN_OR_RETURN(std::shared_ptr<core::Model> model, core::BuildModel(config.model()));
  VISION_ASSIGN_OR_RETURN(
      const export_tool::CheckpointWeights loaded,
      export_tool::LoadCheckpointWeights(checkpoint, *model, model_type, choice));
  VISION_ASSIGN_OR_RETURN(const export_tool::Exported exported, core::GuardTorch("export", [&] {
                            return export_tool::ToLayout(model_type, layout,
                                                         export_tool::ModuleStateDict(*model));
                          }));
  VISION_RETURN_IF_ERROR(models::backbones::WriteTorchStateDict(exported.state, output));
  std::printf("exported the %s weights of %s (step %lld)%s\n", loaded.ema ? "EMA" : "live",
              checkpoint.c_str(), static_cast<long long>(loaded.step),
              loaded.ema && choice == export_tool::WeightsChoice::kDefault
                  ? ": the checkpoint holds EMA weights, exported by default (--weights=model "
                    "exports the live ones)"
              : !loaded.ema && loaded.checkpoint_has_ema ? " (--weights=model; it also holds EMA "
                                                           "weights)"
              : !loaded.checkpoint_has_ema               ? " (the checkpoint holds no EMA weights)"
                                                         : "");
  for (const std::string& note : exported.notes) std::printf("note: %s\n", note.c_str());
  std::printf("wrote %zu tensors in the %s layout of %s to %s\n", exported.state.size(),
              layout.c_str(), model_type.c_str(), output.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace vision::tools

int main(int argc, char** argv) {
  return vision::tools::RunDriver(
      argc, argv,
      "Exports a checkpoint's weights in a reference's layout: export --config=FILE "
      "--checkpoint=FILE --layout=torchvision|mhliao_db|junfu1115_danet|torchvision_resnet|native "
      "--output=FILE.pth "
      "[--weights=ema|model] [--override='TEXT' ...]",
      vision::tools::Run);
}
