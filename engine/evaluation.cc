#include "engine/evaluation.h"

#include <ATen/ATen.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/batch.h"
#include "core/segmentation_model.h"
#include "core/status_macros.h"
#include "core/torch_guard.h"
#include "engine/memory_format.h"
#include "engine/segmentation_inference.h"

namespace vision::engine {

data::LoaderOptions LoaderOptionsFromConfig(const core::LoaderConfig& config, uint64_t seed,
                                            bool pin_memory) {
  data::LoaderOptions o;
  o.batch_size = config.batch_size();
  o.num_workers = config.num_workers();
  o.prefetch_batches = config.prefetch_batches();
  o.drop_last = config.drop_last();
  o.skip_bad_samples = config.on_bad_sample() == core::LoaderConfig::SKIP;
  o.max_bad_sample_fraction = config.max_bad_sample_fraction();
  o.aspect_ratio_group_factor = config.aspect_ratio_group_factor();
  o.seed = seed;
  o.pin_memory = pin_memory;
  return o;
}

EvaluationJob EvaluationJobFromConfig(
    const core::TrainPipelineConfig& config, core::Model* model, const core::Dataset* dataset,
    const std::vector<std::unique_ptr<core::Augmentation>>& augmentations,
    core::Evaluator* evaluator, const c10::Device& device, core::Collectives* collectives) {
  EvaluationJob job;
  job.model = model;
  job.dataset = dataset;
  for (const auto& a : augmentations) job.augmentations.push_back(a.get());
  job.evaluator = evaluator;
  job.loader =
      LoaderOptionsFromConfig(config.eval_data().loader(), config.seed(), device.is_cuda());
  job.device = device;
  job.collectives = collectives;
  job.channels_last = config.memory_format() == core::TrainPipelineConfig::CHANNELS_LAST;
  if (config.evaluation().has_segmentation_inference()) {
    job.segmentation_inference = config.evaluation().segmentation_inference();
  }
  return job;
}

absl::StatusOr<std::map<std::string, double>> RunEvaluation(const EvaluationJob& job) {
  core::Collectives& collectives = *job.collectives;
  std::vector<int64_t> indices;
  for (int64_t i = collectives.rank(); i < job.dataset->Size(); i += collectives.world_size()) {
    indices.push_back(i);
  }
  data::LoaderOptions options = job.loader;
  options.drop_last = false;
  options.keep_ground_truth = true;
  options.refill_skipped = false;
  // Every image once, in order (grouping would reorder and repeat them).
  options.aspect_ratio_group_factor = -1;
  data::DataLoader loader(*job.dataset, job.augmentations, nullptr, options);
  loader.StartEpoch(0, std::move(indices));
  job.model->eval();
  if (job.evaluator != nullptr) job.evaluator->Reset();
  const absl::Status status = core::GuardTorch("evaluation", [&]() -> absl::Status {
    at::NoGradGuard no_grad;
    // Multi-scale segmentation inference, when configured, replaces the model's Predict.
    core::SegmentationModel* segmentation_model = nullptr;
    SegmentationInferenceOptions segmentation_options;
    if (job.segmentation_inference.has_value()) {
      VISION_ASSIGN_OR_RETURN(segmentation_model, core::SegmentationModelForInference(job.model));
      VISION_ASSIGN_OR_RETURN(
          segmentation_options,
          SegmentationInferenceOptionsFromProto(*job.segmentation_inference, options.batch_size));
    }
    while (true) {
      VISION_ASSIGN_OR_RETURN(std::optional<core::Batch> loaded, loader.Next());
      if (!loaded.has_value()) break;
      std::vector<core::Batch> parts;
      if (job.split_by_size) {
        parts = core::SplitByCollatedSize(std::move(*loaded));
      } else {
        parts.push_back(std::move(*loaded));
      }
      for (core::Batch& batch : parts) {
        const auto predict_start = std::chrono::steady_clock::now();
        batch.To(job.device);
        if (job.channels_last) batch.images = ImagesToChannelsLast(batch.images);
        std::vector<core::Sample> predictions =
            segmentation_model != nullptr
                ? PredictSegmentation(*segmentation_model, batch, segmentation_options)
                : job.model->Predict(batch);
        if (job.on_batch_predicted) {
          job.on_batch_predicted(
              batch, std::chrono::duration<double>(std::chrono::steady_clock::now() - predict_start)
                         .count());
        }
        for (size_t i = 0; i < predictions.size(); ++i) {
          const core::Sample& truth = *batch.samples[i].ground_truth;
          if (job.evaluator != nullptr) {
            VISION_RETURN_IF_ERROR(job.evaluator->Add(predictions[i], truth));
            if (!job.results_dir.empty()) {
              VISION_RETURN_IF_ERROR(
                  job.evaluator->WriteResult(predictions[i], truth, job.results_dir));
            }
          }
          if (job.on_prediction) VISION_RETURN_IF_ERROR(job.on_prediction(predictions[i], truth));
        }
      }
    }
    return absl::OkStatus();
  });
  if (job.evaluator == nullptr) {
    VISION_RETURN_IF_ERROR(status);
    return std::map<std::string, double>();
  }
  // Every rank reaches the gather even after a local error (an empty state marks it), so no
  // peer waits for it until the timeout.
  VISION_ASSIGN_OR_RETURN(
      std::vector<std::string> states,
      collectives.AllGather(status.ok() ? job.evaluator->SerializeState() : std::string()));
  VISION_RETURN_IF_ERROR(status);
  for (size_t r = 0; r < states.size(); ++r) {
    if (static_cast<int>(r) == collectives.rank()) continue;
    if (states[r].empty()) {
      return absl::AbortedError(absl::StrCat("evaluation failed on rank ", r, "; see its log"));
    }
    VISION_RETURN_IF_ERROR(job.evaluator->MergeState(states[r]));
  }
  if (!job.results_dir.empty() && collectives.rank() == 0) {
    VISION_RETURN_IF_ERROR(job.evaluator->WriteMergedResults(job.results_dir));
  }
  return job.evaluator->Compute();
}

}  // namespace vision::engine
