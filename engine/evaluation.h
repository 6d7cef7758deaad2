// The evaluation loop shared by the trainer and the eval/infer tools: every rank predicts its
// share of the dataset (every world_size-th sample, no padding, so each sample counts once),
// the evaluators' states are gathered, and the metrics over the whole dataset are returned on
// every rank.
#ifndef VISION_ENGINE_EVALUATION_H_
#define VISION_ENGINE_EVALUATION_H_

#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "absl/status/statusor.h"
#include "core/augmentation.h"
#include "core/collectives.h"
#include "core/config/pipeline.pb.h"
#include "core/dataset.h"
#include "core/evaluator.h"
#include "core/model.h"
#include "data/loader/loader.h"

namespace vision::engine {

struct EvaluationJob {
  core::Model* model = nullptr;
  const core::Dataset* dataset = nullptr;
  std::vector<const core::Augmentation*> augmentations;
  // May be null (inference only): then no metrics are computed.
  core::Evaluator* evaluator = nullptr;
  data::LoaderOptions loader;
  c10::Device device{c10::DeviceType::CPU};
  core::Collectives* collectives = nullptr;
  // Called for every sample with its prediction (original-image coordinates) and ground truth.
  std::function<absl::Status(const core::Sample& prediction, const core::Sample& truth)>
      on_prediction;
  // Called after each batch's predictions with the wall time of moving the batch to the device
  // and predicting (predictions reach the host, so on CUDA it includes the kernels).
  std::function<void(const core::Batch& batch, double seconds)> on_batch_predicted;
  // When set (and an evaluator is given), the evaluator writes its result files here
  // (core::Evaluator::WriteResult on every rank, WriteMergedResults on rank 0).
  std::string results_dir;
  // When set, predictions come from engine::PredictSegmentation with these options (the model
  // must be a core::SegmentationModel) instead of the model's Predict; max_batch_size 0 means
  // loader.batch_size. Set from evaluation.segmentation_inference.
  std::optional<core::SegmentationInferenceConfig> segmentation_inference;
  // Predicts the images of each collated size together (core::SplitByCollatedSize): a batch of
  // images of several sizes becomes one prediction per size, so that no image is padded to
  // another's size and each prediction is that of the image alone (up to floating-point
  // rounding). Inference on a folder of images of any size (tools/infer).
  bool split_by_size = false;
  // The images in channels-last layout (TrainPipelineConfig.memory_format; the model's weights
  // are converted where it is built, engine/memory_format.h).
  bool channels_last = false;
};

// The loader options a LoaderConfig states (batch size, workers, prefetching, drop_last,
// on_bad_sample and its max_bad_sample_fraction, aspect_ratio_group_factor), with the run's
// seed; pinned memory on CUDA.
data::LoaderOptions LoaderOptionsFromConfig(const core::LoaderConfig& config, uint64_t seed,
                                            bool pin_memory);

// The evaluation job of `config`: eval_data.loader's options (LoaderOptionsFromConfig) and
// evaluation.segmentation_inference. The one definition the trainer's evaluation and the eval
// and infer tools share; they add their callbacks and output directories.
EvaluationJob EvaluationJobFromConfig(
    const core::TrainPipelineConfig& config, core::Model* model, const core::Dataset* dataset,
    const std::vector<std::unique_ptr<core::Augmentation>>& augmentations,
    core::Evaluator* evaluator, const c10::Device& device, core::Collectives* collectives);

// Under loader.on_bad_sample: SKIP a bad sample is left out of the metrics (never replaced by
// another sample, which would then count twice).
absl::StatusOr<std::map<std::string, double>> RunEvaluation(const EvaluationJob& job);

}  // namespace vision::engine

#endif  // VISION_ENGINE_EVALUATION_H_
