// Writes what a training run of a config starts from, for the Python references of the models'
// trajectory tests (models/{dbnet,danet,mask_rcnn}/trajectory_test.sh; each model's BUILD links
// this main with its plugins as `trajectory_inputs`):
//   trajectory_inputs --config=FILE [--override=...] --output_dir=DIR
// DIR/checkpoint_0.pt: the initial weights. The trainer (engine/trainer.cc, Trainer::Create)
//   seeds torch with the config's seed and then builds the model first; this does the same, so
//   the checkpoint's "rng/cpu" is the default generator's state the trainer's first step starts
//   from (Mask R-CNN's samplers draw from it).
// DIR/batch.pt: the first `--num` training samples in dataset order, each through the config's
//   augmentations and the model's target generator as the loader runs them (epoch 0), collated
//   as the loader collates a batch: tensors "images" [N, 3, H, W] and one per target [N, H, W]
//   (DBNet's maps; DANet's "semantic", the train ids, uint8, 255 ignored); "image_sizes" [N, 2]
//   (each image's height and width before padding, Batch::image_sizes) and "collated_sizes"
//   [N, 2] (each image's size as it came to the collation, Batch::collated_sizes), int64; and
//   per-image instance targets (Mask R-CNN's "boxes", "labels", "is_crowd", "masks") as
//   "instances_<i>_<name>".
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/serialize.h>
#include <torch/torch.h>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/config/loader.h"
#include "core/pipeline_builder.h"
#include "core/status_macros.h"
#include "data/loader/loader.h"
#include "engine/checkpoint.h"
#include "tools/flags_util.h"

ABSL_FLAG(std::string, config, "", "Pipeline config of the training run.");
ABSL_FLAG(std::string, output_dir, "", "Existing directory for checkpoint_0.pt and batch.pt.");
ABSL_FLAG(int, num, 4, "Training samples to write, from the dataset's first.");

namespace vision::models::testing {
namespace {

absl::Status Run(const std::vector<std::string>& overrides) {
  const std::string dir = absl::GetFlag(FLAGS_output_dir);
  if (dir.empty()) return absl::InvalidArgumentError("--output_dir is required");
  VISION_ASSIGN_OR_RETURN(core::TrainPipelineConfig config,
                          core::LoadPipelineConfig(absl::GetFlag(FLAGS_config), overrides));
  torch::manual_seed(config.seed());
  VISION_ASSIGN_OR_RETURN(std::shared_ptr<core::Model> model, core::BuildModel(config.model()));
  const std::string checkpoint = dir + "/checkpoint_0.pt";
  VISION_RETURN_IF_ERROR(engine::SaveCheckpoint(
      checkpoint, engine::TrainingState{model.get(), nullptr, nullptr}, engine::CheckpointMeta{}));

  VISION_ASSIGN_OR_RETURN(std::unique_ptr<core::Dataset> dataset,
                          core::BuildDataset(config.train_data(), "train_data"));
  VISION_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<core::Augmentation>> augmentations,
                          core::BuildAugmentations(config.train_data(), "train_data"));
  std::vector<const core::Augmentation*> pointers;
  for (const auto& a : augmentations) pointers.push_back(a.get());
  const std::shared_ptr<const core::TargetGenerator> targets = model->MakeTargetGenerator();
  const int64_t num = absl::GetFlag(FLAGS_num);
  if (num < 1 || num > dataset->Size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--num must be in [1, ", dataset->Size(), "], got ", num));
  }
  std::vector<core::Sample> samples;
  std::vector<std::map<std::string, at::Tensor>> instances;
  for (int64_t i = 0; i < num; ++i) {
    VISION_ASSIGN_OR_RETURN(core::Sample sample,
                            data::LoadSample(*dataset, pointers, targets.get(), i, config.seed(),
                                             /*epoch=*/0));
    // The per-image targets, as the loader's workers make them (DataLoader::MakeBatch).
    std::map<std::string, at::Tensor> per_image;
    if (targets != nullptr) VISION_RETURN_IF_ERROR(targets->GenerateInstances(sample, &per_image));
    instances.push_back(std::move(per_image));
    samples.push_back(std::move(sample));
  }
  data::CollateOptions collate;
  collate.targets = targets.get();
  VISION_ASSIGN_OR_RETURN(core::Batch batch, data::Collate(std::move(samples), collate));
  torch::serialize::OutputArchive archive;
  archive.write("images", batch.images);
  for (const auto& [name, tensor] : batch.targets) archive.write(name, tensor);
  archive.write("image_sizes", batch.image_sizes);
  std::vector<int64_t> collated;
  for (const auto& size : batch.collated_sizes) {
    collated.insert(collated.end(), size.begin(), size.end());
  }
  archive.write("collated_sizes", torch::tensor(collated, torch::kLong).view({-1, 2}));
  for (size_t i = 0; i < instances.size(); ++i) {
    for (const auto& [name, tensor] : instances[i]) {
      archive.write(absl::StrCat("instances_", i, "_", name), tensor);
    }
  }
  const std::string batch_path = dir + "/batch.pt";
  archive.save_to(batch_path);
  std::printf("wrote %s and %s\n", checkpoint.c_str(), batch_path.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace vision::models::testing

int main(int argc, char** argv) {
  return vision::tools::RunDriver(
      argc, argv, "trajectory_inputs --config=FILE --output_dir=DIR [--num=4] [--override=...]",
      vision::models::testing::Run);
}
