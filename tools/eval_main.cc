// Evaluates a checkpoint on the config's eval_data and prints the metrics:
//   eval --config=models/dbnet/configs/quickstart.pbtxt --checkpoint=runs/quickstart/best.pt
// Without --checkpoint it evaluates the weights the config's model imports (published weights,
// e.g. MaskRCNNOptions.weights_path with torchvision's maskrcnn_resnet50_fpn file), no training
// run needed; a model that imports none is refused.
// With --output_dir it also writes the evaluator's result files in the format's own layout
// (ICDAR2015: res_<image>.txt per image) and each image with the predictions drawn (green) over
// the ground truth (red, don't-care in grey) as PNG. Run under //tools:launch to evaluate with
// several processes.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/atomic_output.h"
#include "core/config/loader.h"
#include "core/data_agreement.h"
#include "core/pipeline_builder.h"
#include "core/status_macros.h"
#include "distributed/env/distributed_env.h"
#include "distributed/runtime/runtime.h"
#include "engine/device.h"
#include "engine/draw.h"
#include "engine/evaluation.h"
#include "engine/inference.h"
#include "tools/flags_util.h"

ABSL_FLAG(std::string, config, "", "Path of the pipeline config (.pbtxt).");
ABSL_FLAG(std::string, checkpoint, "",
          "Checkpoint to evaluate (checkpoint_N.pt or best.pt); without it, the weights the "
          "config's model imports (e.g. MaskRCNNOptions.weights_path).");
ABSL_FLAG(std::string, output_dir, "",
          "If set: the evaluator's result files and drawn images are written here.");
ABSL_FLAG(int, max_images, -1, "Draw at most this many images (-1: all).");

namespace vision::tools {
namespace {

namespace fs = std::filesystem;

absl::Status Run(const std::vector<std::string>& overrides) {
  const std::string config_path = absl::GetFlag(FLAGS_config);
  const std::string checkpoint = absl::GetFlag(FLAGS_checkpoint);
  if (config_path.empty()) return absl::InvalidArgumentError("--config is required");
  VISION_ASSIGN_OR_RETURN(core::TrainPipelineConfig config,
                          core::LoadPipelineConfig(config_path, overrides));
  if (!config.has_eval_data() || !config.evaluation().has_evaluator()) {
    return absl::InvalidArgumentError(
        absl::StrCat(config_path, ": eval_data and evaluation.evaluator are required"));
  }
  VISION_ASSIGN_OR_RETURN(distributed::env::DistributedEnv env, distributed::env::ReadDistributedEnv());
  // Before joining: NCCL binds to the current device, and a device this machine lacks stops
  // every rank at once.
  VISION_RETURN_IF_ERROR(engine::ResolveDevice(config.device(), env.local_rank).status());
  VISION_ASSIGN_OR_RETURN(std::unique_ptr<core::Collectives> collectives,
                          distributed::runtime::JoinJob(env, config));
  // Only what evaluation needs: the training data need not exist here.
  VISION_ASSIGN_OR_RETURN(engine::InferenceModel loaded,
                          engine::LoadModelForInference(config, checkpoint, env.local_rank));
  VISION_ASSIGN_OR_RETURN(std::unique_ptr<core::Dataset> dataset,
                          core::BuildDataset(config.eval_data(), "eval_data"));
  VISION_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<core::Augmentation>> augmentations,
                          core::BuildAugmentations(config.eval_data(), "eval_data"));
  VISION_ASSIGN_OR_RETURN(std::unique_ptr<core::Evaluator> evaluator,
                          core::BuildEvaluator(config.evaluation()));
  VISION_RETURN_IF_ERROR(core::CheckDataAgreement(config, loaded.model.get(), nullptr,
                                                 dataset.get(), evaluator.get()));
  VISION_RETURN_IF_ERROR(core::PrepareEvaluator(*evaluator, *dataset));

  const std::string output_dir = absl::GetFlag(FLAGS_output_dir);
  // Results and drawings appear when the evaluation has finished (README, "Data policies").
  std::unique_ptr<core::StagedDirectory> staged;
  if (!output_dir.empty()) {
    VISION_ASSIGN_OR_RETURN(staged, core::StagedDirectory::Create(output_dir));
  }
  int drawn = 0;
  // As the trainer evaluates (eval_data.loader's options, on_bad_sample included).
  engine::EvaluationJob job =
      engine::EvaluationJobFromConfig(config, loaded.model.get(), dataset.get(), augmentations,
                                      evaluator.get(), loaded.device, collectives.get());
  if (staged != nullptr) job.results_dir = staged->path();
  if (!output_dir.empty()) {
    job.on_prediction = [&](const core::Sample& prediction, const core::Sample& truth) {
      const int max_images = absl::GetFlag(FLAGS_max_images);
      if (max_images >= 0 && drawn >= max_images) return absl::OkStatus();
      ++drawn;
      return engine::WriteDrawing(staged->path(), prediction, truth);
    };
  }
  using Metrics = std::map<std::string, double>;
  VISION_ASSIGN_OR_RETURN(Metrics metrics, engine::RunEvaluation(job));
  if (staged != nullptr) VISION_RETURN_IF_ERROR(staged->Commit());
  if (collectives->rank() == 0) {
    std::printf("%s on %s:\n", loaded.weights.c_str(), dataset->Describe().c_str());
    for (const auto& [name, value] : metrics) std::printf("  %-10s %.4f\n", name.c_str(), value);
    if (!output_dir.empty()) std::printf("results and drawings in %s\n", output_dir.c_str());
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace vision::tools

int main(int argc, char** argv) {
  return vision::tools::RunDriver(
      argc, argv,
      "Evaluates a checkpoint: eval --config=FILE [--checkpoint=FILE] [--output_dir=DIR] "
      "[--override='TEXT' ...]",
      vision::tools::Run);
}
