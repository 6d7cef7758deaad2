// The one "load a model for inference" step of the eval and infer tools: build the config's
// model, load a checkpoint's weights (the EMA weights when the run kept an EMA, as the trainer
// evaluates), move it to the config's device and switch it to evaluation mode. Without a
// checkpoint the model keeps the weights its plugin imported as it was built
// (core::Model::ImportedWeights, e.g. MaskRCNNOptions.weights_path: published weights evaluated
// without a training run); a model that imported none is refused rather than run on initialised
// weights.
#ifndef VISION_ENGINE_INFERENCE_H_
#define VISION_ENGINE_INFERENCE_H_

#include <memory>
#include <string>

#include <c10/core/Device.h>

#include "absl/status/statusor.h"
#include "core/config/pipeline.pb.h"
#include "core/model.h"
#include "engine/checkpoint.h"

namespace vision::engine {

struct InferenceModel {
  std::shared_ptr<core::Model> model;
  c10::Device device{c10::DeviceType::CPU};
  // The checkpoint's step, config and metrics (defaults without a checkpoint).
  CheckpointMeta meta;
  // For people: "<checkpoint> (step N)" or the model's ImportedWeights().
  std::string weights;
};

// `local_rank` picks the GPU for device: "cuda" (engine/device.h). `checkpoint` may be empty
// when the config's model imports its weights (see above).
absl::StatusOr<InferenceModel> LoadModelForInference(const core::TrainPipelineConfig& config,
                                                     const std::string& checkpoint,
                                                     int local_rank);

}  // namespace vision::engine

#endif  // VISION_ENGINE_INFERENCE_H_
