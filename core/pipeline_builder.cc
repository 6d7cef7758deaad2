#include "core/pipeline_builder.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/data_agreement.h"
#include "core/image_io.h"
#include "core/lr_warmup.h"
#include "core/param_groups.h"
#include "core/segmentation_model.h"
#include "core/status_macros.h"
#include "core/status_util.h"
#include "core/torch_guard.h"

namespace vision::core {
namespace {

// Prefixes a plugin's error with the config field it came from; LibTorch exceptions thrown
// while constructing a module become statuses too.
template <typename T, typename Make>
absl::StatusOr<T> WithContext(const std::string& field, Make make) {
  return GuardTorch(field, [&]() -> absl::StatusOr<T> { return core::WithContext(field, make()); });
}

int64_t CountParameters(const torch::nn::Module& module) {
  int64_t count = 0;
  for (const at::Tensor& p : module.parameters()) count += p.numel();
  return count;
}

// "; trains on text polygons, class-agnostic", or nothing when a plugin states no needs.
std::string Needs(const char* verb, const std::optional<TaskRequirements>& needs) {
  return needs ? absl::StrCat("; ", verb, " ", DescribeRequirements(*needs)) : "";
}

// Runs the dataset's Load under its DataConfig's pixel limit (max_image_pixels): every image
// the dataset reads through core::ReadImage on the loading thread is held to it, whatever the
// plugin, without the plugins knowing the setting.
class PixelLimitedDataset final : public Dataset {
 public:
  PixelLimitedDataset(std::unique_ptr<Dataset> dataset, int64_t max_pixels, std::string setting)
      : dataset_(std::move(dataset)), max_pixels_(max_pixels), setting_(std::move(setting)) {}
  int64_t Size() const override { return dataset_->Size(); }
  absl::StatusOr<Sample> Load(int64_t index) const override {
    const ScopedMaxImagePixels limit(max_pixels_, setting_);
    return dataset_->Load(index);
  }
  std::string Describe() const override { return dataset_->Describe(); }
  std::optional<DatasetMetadata> Metadata() const override { return dataset_->Metadata(); }
  // Forwarded like the rest: without it evaluators scored the default, the training
  // annotations (COCO's boxes and polygons clamped to the image), not the file's.
  absl::StatusOr<Sample> GroundTruth(int64_t index, const Sample& loaded) const override {
    return dataset_->GroundTruth(index, loaded);
  }
  // Forwarded too: a dataset that knows its sizes answers without decoding; the default
  // decodes, under the limit.
  absl::StatusOr<cv::Size> ImageSize(int64_t index) const override {
    const ScopedMaxImagePixels limit(max_pixels_, setting_);
    return dataset_->ImageSize(index);
  }

 private:
  const std::unique_ptr<Dataset> dataset_;
  const int64_t max_pixels_;
  const std::string setting_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<Model>> BuildModel(const PluginSpec& spec) {
  return WithContext<std::shared_ptr<Model>>(
      "model", [&]() -> absl::StatusOr<std::shared_ptr<Model>> {
        VISION_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                                ModelRegistry::Get().Create(spec.type(), spec.options()));
        // Modules must be owned by a shared_ptr: LibTorch's module traversal uses shared_from_this.
        return std::shared_ptr<Model>(std::move(model));
      });
}

absl::StatusOr<std::unique_ptr<Dataset>> BuildDataset(const DataConfig& data,
                                                      const std::string& field,
                                                      const std::string& limit_setting) {
  VISION_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> dataset,
                          WithContext<std::unique_ptr<Dataset>>(field + ".dataset", [&] {
                            return DatasetRegistry::Get().Create(data.dataset().type(),
                                                                 data.dataset().options());
                          }));
  return std::unique_ptr<Dataset>(std::make_unique<PixelLimitedDataset>(
      std::move(dataset), data.max_image_pixels(),
      limit_setting.empty() ? field + ".max_image_pixels" : limit_setting));
}

absl::StatusOr<std::vector<std::unique_ptr<Augmentation>>> BuildAugmentations(
    const DataConfig& data, const std::string& field) {
  std::vector<std::unique_ptr<Augmentation>> augmentations;
  for (int i = 0; i < data.augmentations_size(); ++i) {
    const PluginSpec& spec = data.augmentations(i);
    VISION_ASSIGN_OR_RETURN(
        std::unique_ptr<Augmentation> aug,
        WithContext<std::unique_ptr<Augmentation>>(
            absl::StrCat(field, ".augmentations[", i, "]"),
            [&] { return AugmentationRegistry::Get().Create(spec.type(), spec.options()); }));
    augmentations.push_back(std::move(aug));
  }
  return augmentations;
}

absl::StatusOr<std::unique_ptr<Optimizer>> BuildOptimizer(
    const OptimizerConfig& config, const Model& model, int64_t global_batch_size,
    c10::DeviceType device_type, std::vector<ParamGroupSummary>* groups) {
  const double lr =
      ScaledLearningRate(config.lr(), global_batch_size, config.reference_batch_size());
  std::vector<ParamGroupSpec> specs = MakeParamGroups(model, config, lr);
  if (groups != nullptr) {
    groups->clear();
    for (const ParamGroupSpec& spec : specs) {
      ParamGroupSummary summary{spec.name, static_cast<int64_t>(spec.params.size()), 0, spec.lr,
                                spec.weight_decay};
      for (const at::Tensor& t : spec.params) summary.values += t.numel();
      groups->push_back(std::move(summary));
    }
  }
  return WithContext<std::unique_ptr<Optimizer>>("optimizer", [&] {
    return OptimizerRegistry::Get().Create(
        config.type(), config.options(),
        OptimizerSpec{std::move(specs), config.implementation(), device_type});
  });
}

absl::StatusOr<std::unique_ptr<LrSchedule>> BuildLrSchedule(const LrScheduleConfig& config) {
  absl::StatusOr<std::unique_ptr<LrSchedule>> schedule =
      WithContext<std::unique_ptr<LrSchedule>>("lr_schedule", [&] {
        return LrScheduleRegistry::Get().Create(config.type(), config.options());
      });
  if (!schedule.ok() || config.warmup_steps() == 0) return schedule;
  return std::unique_ptr<LrSchedule>(std::make_unique<WarmupSchedule>(
      std::move(schedule).value(), config.warmup_steps(), config.warmup_start_factor()));
}

absl::StatusOr<std::unique_ptr<CommStrategy>> BuildCommStrategy(const DistributedConfig& config) {
  if (!config.has_strategy()) return std::unique_ptr<CommStrategy>();
  return WithContext<std::unique_ptr<CommStrategy>>("distributed.strategy", [&] {
    return CommStrategyRegistry::Get().Create(config.strategy().type(), config.strategy().options());
  });
}

absl::StatusOr<std::unique_ptr<Evaluator>> BuildEvaluator(const EvaluationConfig& config) {
  if (!config.has_evaluator()) return std::unique_ptr<Evaluator>();
  return WithContext<std::unique_ptr<Evaluator>>("evaluation.evaluator", [&] {
    return EvaluatorRegistry::Get().Create(config.evaluator().type(), config.evaluator().options());
  });
}

absl::StatusOr<Pipeline> BuildPipeline(const TrainPipelineConfig& config, int world_size) {
  Pipeline p;
  p.global_batch_size = static_cast<int64_t>(config.train_data().loader().batch_size()) *
                        world_size * config.train().gradient_accumulation_steps();
  p.scaled_lr = ScaledLearningRate(config.optimizer().lr(), p.global_batch_size,
                                   config.optimizer().reference_batch_size());

  VISION_ASSIGN_OR_RETURN(p.model, BuildModel(config.model()));
  if (config.evaluation().has_segmentation_inference()) {
    VISION_RETURN_IF_ERROR(SegmentationModelForInference(p.model.get()).status());
  }
  VISION_ASSIGN_OR_RETURN(p.train_dataset, BuildDataset(config.train_data(), "train_data"));
  VISION_ASSIGN_OR_RETURN(p.train_augmentations,
                           BuildAugmentations(config.train_data(), "train_data"));
  if (config.has_eval_data()) {
    VISION_ASSIGN_OR_RETURN(p.eval_dataset, BuildDataset(config.eval_data(), "eval_data"));
    VISION_ASSIGN_OR_RETURN(p.eval_augmentations,
                             BuildAugmentations(config.eval_data(), "eval_data"));
  }
  // "cuda" and "cuda:N"; the trainer checks the name (engine/device.h).
  const c10::DeviceType device_type =
      absl::StartsWith(config.device(), "cuda") ? c10::kCUDA : c10::kCPU;
  VISION_ASSIGN_OR_RETURN(p.optimizer, BuildOptimizer(config.optimizer(), *p.model,
                                                      p.global_batch_size, device_type,
                                                      &p.param_groups));
  VISION_ASSIGN_OR_RETURN(p.lr_schedule, BuildLrSchedule(config.lr_schedule()));
  VISION_ASSIGN_OR_RETURN(p.comm_strategy, BuildCommStrategy(config.distributed()));
  VISION_ASSIGN_OR_RETURN(p.evaluator, BuildEvaluator(config.evaluation()));
  VISION_ASSIGN_OR_RETURN(p.hooks, BuildHooks(config));
  VISION_RETURN_IF_ERROR(CheckDataAgreement(config, p.model.get(), p.train_dataset.get(),
                                            p.eval_dataset.get(), p.evaluator.get()));
  if (p.evaluator != nullptr && p.eval_dataset != nullptr) {
    VISION_RETURN_IF_ERROR(PrepareEvaluator(*p.evaluator, *p.eval_dataset));
  }
  return p;
}

absl::StatusOr<std::vector<std::unique_ptr<Hook>>> BuildHooks(const TrainPipelineConfig& config) {
  std::vector<std::unique_ptr<Hook>> hooks;
  for (int i = 0; i < config.hooks_size(); ++i) {
    const PluginSpec& spec = config.hooks(i);
    VISION_ASSIGN_OR_RETURN(std::unique_ptr<Hook> hook,
                            WithContext<std::unique_ptr<Hook>>(absl::StrCat("hooks[", i, "]"), [&] {
                              return HookRegistry::Get().Create(spec.type(), spec.options());
                            }));
    hooks.push_back(std::move(hook));
  }
  return hooks;
}

absl::Status PrepareEvaluator(Evaluator& evaluator, const Dataset& dataset) {
  const std::optional<DatasetMetadata> metadata = dataset.Metadata();
  if (!metadata.has_value()) return absl::OkStatus();
  return WithContext("evaluation.evaluator", evaluator.SetDatasetMetadata(*metadata));
}

std::string DescribePipeline(const TrainPipelineConfig& config, const Pipeline& p) {
  std::vector<std::string> lines;
  lines.push_back(absl::StrFormat("model:          %s (%.2fM parameters%s)", config.model().type(),
                                  CountParameters(*p.model) / 1e6,
                                  Needs("trains on", p.model->DataRequirements())));
  auto describe_data = [&](const char* role, const DataConfig& data, const Dataset& dataset) {
    std::vector<std::string> augs;
    for (const PluginSpec& spec : data.augmentations()) augs.push_back(spec.type());
    lines.push_back(absl::StrFormat("%-15s %s: %s", absl::StrCat(role, ":"), data.dataset().type(),
                                    dataset.Describe()));
    if (std::optional<DatasetMetadata> metadata = dataset.Metadata()) {
      lines.push_back(absl::StrFormat("%s annotations: %s", role, DescribeMetadata(*metadata)));
    }
    lines.push_back(absl::StrFormat("%-15s %s", absl::StrCat(role, " augment:"),
                                    augs.empty() ? "(none)" : absl::StrJoin(augs, " -> ")));
  };
  describe_data("train data", config.train_data(), *p.train_dataset);
  if (p.eval_dataset) describe_data("eval data", config.eval_data(), *p.eval_dataset);
  std::vector<std::string> groups;
  auto& torch_groups = p.optimizer->torch_optimizer().param_groups();
  for (size_t i = 0; i < torch_groups.size(); ++i) {
    int64_t n = 0;
    for (const at::Tensor& t : torch_groups[i].params()) n += t.numel();
    groups.push_back(absl::StrFormat("group %d: %d tensors, %d values, lr %g", i,
                                     torch_groups[i].params().size(), n,
                                     torch_groups[i].options().get_lr()));
  }
  lines.push_back(absl::StrFormat(
      "optimizer:      %s (%s implementation), base lr %g scaled to %g for global batch %d "
      "(reference %d); %s",
      config.optimizer().type(),
      OptimizerConfig::Implementation_Name(config.optimizer().implementation()),
      config.optimizer().lr(), p.scaled_lr, p.global_batch_size,
      config.optimizer().reference_batch_size(), absl::StrJoin(groups, "; ")));
  lines.push_back(absl::StrFormat("lr schedule:    %s, warmup %d steps from factor %g",
                                  config.lr_schedule().type(), config.lr_schedule().warmup_steps(),
                                  config.lr_schedule().warmup_start_factor()));
  lines.push_back(absl::StrFormat(
      "comm strategy:  %s", p.comm_strategy ? config.distributed().strategy().type()
                                            : std::string("(none: gradients are not communicated)")));
  lines.push_back(absl::StrFormat(
      "evaluator:      %s",
      p.evaluator ? absl::StrCat(config.evaluation().evaluator().type(), " (main metric ",
                                 p.evaluator->MainMetric(),
                                 Needs("scores", p.evaluator->DataRequirements()), ")")
                  : std::string("(none)")));
  if (config.hooks_size() > 0) {
    std::vector<std::string> hooks;
    for (const PluginSpec& hook : config.hooks()) hooks.push_back(hook.type());
    lines.push_back(absl::StrCat("hooks:          ", absl::StrJoin(hooks, ", "),
                                 " (after the loop's own; before checkpointing)"));
  }
  lines.push_back(absl::StrFormat("device:         %s, mixed precision %s", config.device(),
                                  config.mixed_precision().enabled()
                                      ? MixedPrecisionConfig::Dtype_Name(config.mixed_precision().dtype())
                                      : std::string("off")));
  return absl::StrJoin(lines, "\n");
}

std::string DescribeEffectiveRecipe(const TrainPipelineConfig& config, const Pipeline& p,
                                    int world_size, int64_t total_steps) {
  const OptimizerConfig& opt = config.optimizer();
  const int per_process = config.train_data().loader().batch_size();
  const int accumulation = config.train().gradient_accumulation_steps();
  std::vector<std::string> lines;
  std::string lr_line = absl::StrFormat("lr %g", opt.lr());
  if (opt.has_reference_batch_size()) {
    absl::StrAppend(&lr_line, absl::StrFormat(
        " x %d/%d = %g (linear scaling rule: global batch / optimizer.reference_batch_size)",
        p.global_batch_size, opt.reference_batch_size(), p.scaled_lr));
  } else {
    absl::StrAppend(&lr_line, " (not scaled: optimizer.reference_batch_size is not set)");
  }
  lines.push_back(absl::StrFormat(
      "recipe at %d process%s: global batch %d = %d per process x %d process%s x %d "
      "accumulation step%s; %s",
      world_size, world_size == 1 ? "" : "es", p.global_batch_size, per_process, world_size,
      world_size == 1 ? "" : "es", accumulation, accumulation == 1 ? "" : "s", lr_line));

  // The schedule in steps, read off the schedule itself (whatever its kind): warmup, the steps
  // where a flat stretch drops (step schedules), and the rate along the way.
  if (p.lr_schedule != nullptr && total_steps > 0) {
    const int64_t warmup = std::min<int64_t>(config.lr_schedule().warmup_steps(), total_steps);
    std::vector<double> factor(total_steps);
    for (int64_t s = 0; s < total_steps; ++s) factor[s] = p.lr_schedule->Factor(s, total_steps);
    std::vector<std::string> parts;
    if (warmup > 0) {
      parts.push_back(absl::StrFormat("warmup steps 1-%d from %.4g", warmup,
                                      p.scaled_lr * factor[0]));
    }
    std::vector<std::string> drops;
    for (int64_t s = std::max<int64_t>(warmup + 2, 2); s < total_steps; ++s) {
      if (factor[s - 1] == factor[s - 2] && factor[s] < factor[s - 1] * 0.999) {
        if (drops.size() == 8) {
          drops.push_back("...");
          break;
        }
        drops.push_back(absl::StrFormat("%d (x%.3g)", s, factor[s] / factor[s - 1]));
      }
    }
    if (!drops.empty()) parts.push_back(absl::StrCat("drops after steps ", absl::StrJoin(drops, ", ")));
    std::vector<std::string> along;
    for (const auto& [name, fraction] :
         {std::pair<const char*, double>{"25%", 0.25}, {"50%", 0.5}, {"75%", 0.75}}) {
      const int64_t s = std::clamp<int64_t>(static_cast<int64_t>(fraction * total_steps), 1,
                                            total_steps) - 1;
      along.push_back(absl::StrFormat("%s (step %d) %.4g", name, s + 1, p.scaled_lr * factor[s]));
    }
    along.push_back(absl::StrFormat("last (step %d) %.4g", total_steps,
                                    p.scaled_lr * factor[total_steps - 1]));
    parts.push_back(absl::StrCat("lr at ", absl::StrJoin(along, ", ")));
    lines.push_back(absl::StrFormat("  %s over %d steps: %s", config.lr_schedule().type(),
                                    total_steps, absl::StrJoin(parts, "; ")));
  }
  std::vector<std::string> groups;
  for (const ParamGroupSummary& g : p.param_groups) {
    groups.push_back(absl::StrFormat("%s (%d tensors, %d values): lr %g, weight decay %g", g.name,
                                     g.tensors, g.values, g.lr, g.weight_decay));
  }
  lines.push_back(absl::StrCat("  parameter groups:",
                               groups.empty() ? " (none)" : "\n    " + absl::StrJoin(groups, "\n    ")));
  return absl::StrJoin(lines, "\n");
}

}  // namespace vision::core
