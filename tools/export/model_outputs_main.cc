// Writes a checkpoint's model outputs on seeded random images, for the tests that compare a
// reference implementation loaded with an export (//tools/export:export) against this project:
//   model_outputs --config=FILE --checkpoint=FILE --sizes=64x64,96x128 --output=outputs.pth
// The checkpoint's weights are loaded as the export tool loads them (the EMA weights by default),
// the model runs in eval mode, and the file (a torch.save dict) holds per size i
// "case<i>/images" ([1, 3, H, W], torch::randn after manual_seed(0)) and the outputs:
// DBNet "probability", "threshold", "binary" ([1, 1, H, W]); DANet "fused", "position",
// "channel" ([1, classes, H, W], each upsampled to the image as the model does).
#include <torch/torch.h>

#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/config/loader.h"
#include "core/pipeline_builder.h"
#include "core/status_macros.h"
#include "core/torch_guard.h"
#include "models/backbones/torch_save_writer.h"
#include "models/danet/danet.h"
#include "models/dbnet/dbnet.h"
#include "tools/export/export.h"
#include "tools/flags_util.h"

ABSL_FLAG(std::string, config, "", "Pipeline config the checkpoint was trained with.");
ABSL_FLAG(std::string, checkpoint, "", "Checkpoint whose weights to run.");
ABSL_FLAG(std::string, sizes, "64x64", "Comma-separated HxW image sizes, one case each.");
ABSL_FLAG(std::string, output, "", "The .pth file to write.");

namespace vision::tools {
namespace {

absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> ParseSizes(const std::string& text) {
  std::vector<std::pair<int64_t, int64_t>> sizes;
  for (const absl::string_view item : absl::StrSplit(text, ',')) {
    const std::vector<std::string> parts = absl::StrSplit(item, 'x');
    int64_t h = 0, w = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &h) || !absl::SimpleAtoi(parts[1], &w) ||
        h < 32 || w < 32) {
      return absl::InvalidArgumentError(
          absl::StrCat("--sizes='", text, "': give HxW[,HxW...], each side at least 32"));
    }
    sizes.emplace_back(h, w);
  }
  return sizes;
}

models::backbones::StateDict Outputs(core::Model& model,
                                     const std::vector<std::pair<int64_t, int64_t>>& sizes) {
  torch::NoGradGuard no_grad;
  model.eval();
  torch::manual_seed(0);
  models::backbones::StateDict out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::string c = absl::StrCat("case", i, "/");
    const at::Tensor images = torch::randn({1, 3, sizes[i].first, sizes[i].second});
    out.emplace_back(c + "images", images);
    if (auto* dbnet = dynamic_cast<models::dbnet::DBNet*>(&model)) {
      const models::dbnet::DBHeadOutput maps = dbnet->Forward(images, /*with_threshold=*/true);
      out.emplace_back(c + "probability", maps.probability);
      out.emplace_back(c + "threshold", maps.threshold);
      out.emplace_back(c + "binary", maps.binary);
    } else {
      auto& danet = dynamic_cast<models::danet::DANet&>(model);
      const models::danet::DANetOutput logits = danet.Forward(images, /*all_outputs=*/true);
      out.emplace_back(c + "fused", logits.fused);
      out.emplace_back(c + "position", logits.position);
      out.emplace_back(c + "channel", logits.channel);
    }
  }
  return out;
}

absl::Status Run(const std::vector<std::string>& overrides) {
  for (const auto& [flag, value] : {std::pair{"--config", absl::GetFlag(FLAGS_config)},
                                    {"--checkpoint", absl::GetFlag(FLAGS_checkpoint)},
                                    {"--output", absl::GetFlag(FLAGS_output)}}) {
    if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, " is required"));
  }
  VISION_ASSIGN_OR_RETURN(const auto sizes, ParseSizes(absl::GetFlag(FLAGS_sizes)));
  VISION_ASSIGN_OR_RETURN(core::TrainPipelineConfig config,
                          core::LoadPipelineConfig(absl::GetFlag(FLAGS_config), overrides));
  const std::string model_type = config.model().type();
  if (model_type != "DBNet" && model_type != "DANet") {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", model_type, "': model_outputs runs DBNet and DANet"));
  }
  VISION_ASSIGN_OR_RETURN(std::shared_ptr<core::Model> model, core::BuildModel(config.model()));
  VISION_RETURN_IF_ERROR(export_tool::LoadCheckpointWeights(absl::GetFlag(FLAGS_checkpoint), *model,
                                                            model_type,
                                                            export_tool::WeightsChoice::kDefault)
                             .status());
  VISION_ASSIGN_OR_RETURN(
      const models::backbones::StateDict outputs,
      core::GuardTorch("running the model", [&]() -> absl::StatusOr<models::backbones::StateDict> {
        return Outputs(*model, sizes);
      }));
  VISION_RETURN_IF_ERROR(
      models::backbones::WriteTorchStateDict(outputs, absl::GetFlag(FLAGS_output)));
  std::printf("wrote %zu tensors of %s on %zu image size(s) to %s\n", outputs.size(),
              model_type.c_str(), sizes.size(), absl::GetFlag(FLAGS_output).c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace vision::tools

int main(int argc, char** argv) {
  return vision::tools::RunDriver(
      argc, argv,
      "model_outputs --config=FILE --checkpoint=FILE --output=FILE.pth [--sizes=HxW,...]",
      vision::tools::Run);
}
