// Builds every component of a training pipeline from the config through the registries:
// one builder per config message, each returning absl::StatusOr with errors that name the
// config field ("model.options: ...", "train_data.augmentations[2].type: ...").
#ifndef VISION_CORE_PIPELINE_BUILDER_H_
#define VISION_CORE_PIPELINE_BUILDER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/augmentation.h"
#include "core/comm_strategy.h"
#include "core/config/pipeline.pb.h"
#include "core/dataset.h"
#include "core/evaluator.h"
#include "core/hook.h"
#include "core/lr_schedule.h"
#include "core/model.h"
#include "core/optimizer.h"

namespace vision::core {

absl::StatusOr<std::shared_ptr<Model>> BuildModel(const PluginSpec& spec);

// The configured dataset, whose Load reads images under data.max_image_pixels
// (core/image_io.h's ScopedMaxImagePixels; a larger image is a bad sample naming the setting,
// `limit_setting`, by default "<field>.max_image_pixels").
absl::StatusOr<std::unique_ptr<Dataset>> BuildDataset(const DataConfig& data,
                                                      const std::string& field,
                                                      const std::string& limit_setting = "");

absl::StatusOr<std::vector<std::unique_ptr<Augmentation>>> BuildAugmentations(
    const DataConfig& data, const std::string& field);

// Parameter groups (core/param_groups.h) with the learning rate scaled by the linear scaling
// rule for `global_batch_size` images per optimizer step, for parameters that will be trained
// on `device_type`.
// When `groups` is given, it receives what each group holds and its rate and decay.
struct ParamGroupSummary {
  std::string name;  // "decay", "no_decay", "backbone_decay", "backbone_no_decay"
  int64_t tensors = 0;
  int64_t values = 0;
  double lr = 0;  // the scaled base rate of the group (before the schedule)
  double weight_decay = 0;
};
absl::StatusOr<std::unique_ptr<Optimizer>> BuildOptimizer(
    const OptimizerConfig& config, const Model& model, int64_t global_batch_size,
    c10::DeviceType device_type, std::vector<ParamGroupSummary>* groups = nullptr);

// The configured schedule with its warmup (core/lr_warmup.h).
absl::StatusOr<std::unique_ptr<LrSchedule>> BuildLrSchedule(const LrScheduleConfig& config);

// Null when the config names no strategy (a single process needs none).
absl::StatusOr<std::unique_ptr<CommStrategy>> BuildCommStrategy(const DistributedConfig& config);

// Null when the config names no evaluator.
absl::StatusOr<std::unique_ptr<Evaluator>> BuildEvaluator(const EvaluationConfig& config);
// The config's `hooks`, in order (empty when it names none).
absl::StatusOr<std::vector<std::unique_ptr<Hook>>> BuildHooks(const TrainPipelineConfig& config);

// Gives `evaluator` the metadata of the dataset it scores (Evaluator::SetDatasetMetadata), if
// the dataset states any. BuildPipeline does this; tools that build an evaluator alone call it.
absl::Status PrepareEvaluator(Evaluator& evaluator, const Dataset& dataset);

// Everything a training run is made of.
struct Pipeline {
  std::shared_ptr<Model> model;
  std::unique_ptr<Dataset> train_dataset;
  std::vector<std::unique_ptr<Augmentation>> train_augmentations;
  std::unique_ptr<Dataset> eval_dataset;  // null without eval_data
  std::vector<std::unique_ptr<Augmentation>> eval_augmentations;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<LrSchedule> lr_schedule;
  std::unique_ptr<CommStrategy> comm_strategy;  // null without distributed.strategy
  std::unique_ptr<Evaluator> evaluator;         // null without evaluation.evaluator
  std::vector<std::unique_ptr<Hook>> hooks;     // the config's `hooks`, in order
  int64_t global_batch_size = 0;
  double scaled_lr = 0;
  std::vector<ParamGroupSummary> param_groups;  // the optimizer's groups, in its order
};

// Builds all components for a job of `world_size` processes, checks that the datasets, model
// and evaluator agree on annotations and classes (core/data_agreement.h) and prepares the
// evaluator with the evaluation dataset's metadata.
absl::StatusOr<Pipeline> BuildPipeline(const TrainPipelineConfig& config, int world_size);

// One line per role: "model: DBNet (12.3M parameters; trains on text polygons, ...)",
// "train data annotations: object instances, 80 classes: ...", "optimizer: SGD, lr 0.007 ...".
std::string DescribePipeline(const TrainPipelineConfig& config, const Pipeline& pipeline);

// The recipe as it runs at `world_size` processes for `total_steps` optimizer steps, printed
// when training starts: the global batch and how it is made, the learning rate scaled by the
// linear scaling rule against optimizer.reference_batch_size, the schedule in steps (warmup,
// the steps where a step schedule drops, the rate at 25/50/75% and at the last step), and each
// parameter group's rate and weight decay. E.g. "recipe at 4 processes: global batch 16 = ...".
std::string DescribeEffectiveRecipe(const TrainPipelineConfig& config, const Pipeline& pipeline,
                                    int world_size, int64_t total_steps);

}  // namespace vision::core

#endif  // VISION_CORE_PIPELINE_BUILDER_H_
