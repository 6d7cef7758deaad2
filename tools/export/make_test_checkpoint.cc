// Writes a checkpoint of a config's model at its seeded initialisation, as the trainer's
// checkpoints are written (engine/checkpoint.h), for the export tests:
//   make_test_checkpoint --config=FILE --output=ckpt.pt [--seed=N] [--record_config=false]
// When the config keeps an EMA (train.ema_decay > 0), the EMA holds the initial weights and the
// live weights are moved away from them, so that a test can tell which ones were exported.
// --record_config=false leaves the checkpoint's recorded config empty (as a foreign file).
// --randomize moves every weight away from its initialisation (the zero ones too: deformable
// offset branches, DANet's attention gammas) and draws BatchNorm statistics, so that a model's
// outputs depend on every tensor, as a trained model's do (the ONNX test).
#include <google/protobuf/text_format.h>
#include <torch/torch.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/config/loader.h"
#include "core/pipeline_builder.h"
#include "core/status_macros.h"
#include "engine/checkpoint.h"
#include "engine/ema.h"
#include "tools/flags_util.h"

ABSL_FLAG(std::string, config, "", "Pipeline config whose model to save.");
ABSL_FLAG(std::string, output, "", "Checkpoint file to write.");
ABSL_FLAG(int, seed, 1, "torch::manual_seed before the model is built.");
ABSL_FLAG(bool, record_config, true, "Record the config's text in the checkpoint.");
ABSL_FLAG(bool, randomize, false,
          "Perturb every parameter (zero-initialised ones included), set attention gammas to "
          "0.5 and draw BatchNorm running statistics.");

namespace vision::tools {
namespace {

absl::Status Run(const std::vector<std::string>& overrides) {
  VISION_ASSIGN_OR_RETURN(core::TrainPipelineConfig config,
                          core::LoadPipelineConfig(absl::GetFlag(FLAGS_config), overrides));
  torch::manual_seed(absl::GetFlag(FLAGS_seed));
  VISION_ASSIGN_OR_RETURN(std::shared_ptr<core::Model> model, core::BuildModel(config.model()));
  if (absl::GetFlag(FLAGS_randomize)) {
    torch::NoGradGuard no_grad;
    for (const auto& item : model->named_parameters()) {
      at::Tensor p = item.value();
      if (absl::EndsWith(item.key(), ".gamma")) {
        p.fill_(0.5);
        continue;
      }
      const double spread = p.numel() > 1 ? p.std().item<double>() : 0.0;
      p.add_(torch::randn_like(p), spread > 0 ? 0.2 * spread : 0.01);
    }
    for (const auto& item : model->named_buffers()) {
      at::Tensor b = item.value();
      if (absl::EndsWith(item.key(), "running_mean")) b.normal_(0.0, 0.1);
      if (absl::EndsWith(item.key(), "running_var")) b.uniform_(0.5, 1.5);
    }
  }
  std::unique_ptr<engine::ModelEma> ema;
  if (config.train().ema_decay() > 0) {
    ema = std::make_unique<engine::ModelEma>(*model, config.train().ema_decay());
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.add_(torch::randn_like(p), 0.01);
  }
  engine::CheckpointMeta meta;
  meta.step = 7;
  if (absl::GetFlag(FLAGS_record_config)) {
    google::protobuf::TextFormat::PrintToString(config, &meta.config_text);
  }
  VISION_RETURN_IF_ERROR(engine::SaveCheckpoint(
      absl::GetFlag(FLAGS_output), engine::TrainingState{model.get(), nullptr, ema.get()}, meta));
  std::printf("wrote %s\n", absl::GetFlag(FLAGS_output).c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace vision::tools

int main(int argc, char** argv) {
  return vision::tools::RunDriver(argc, argv, "make_test_checkpoint --config=FILE --output=FILE",
                                  vision::tools::Run);
}
