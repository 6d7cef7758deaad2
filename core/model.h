// The model family: a LibTorch module that turns a batch into named losses (training) and
// into predictions (evaluation). The engine is the same for every model.
#ifndef VISION_CORE_MODEL_H_
#define VISION_CORE_MODEL_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/batch.h"
#include "core/plugin.h"
#include "core/sample.h"
#include "core/target_generator.h"
#include "core/task_metadata.h"

namespace vision::core {

class Model : public torch::nn::Module {
 public:
  static constexpr char kFamily[] = "model";

  // Named loss terms for a training batch; the engine sums them with the configured weights.
  virtual std::map<std::string, at::Tensor> Losses(const Batch& batch) = 0;

  // Predictions for each sample of the batch, in original-image coordinates, in the same
  // Sample type that datasets produce (so evaluators compare like with like).
  virtual std::vector<Sample> Predict(const Batch& batch) = 0;

  // Training-target generation that runs in the loader's worker threads; null if the model
  // needs none. Called once; the generator must be safe to call from several threads.
  virtual std::shared_ptr<const TargetGenerator> MakeTargetGenerator() const { return nullptr; }

  // Recompute these submodules' forward in backward instead of storing their activations
  // (names as in named_modules(), e.g. "backbone.layer4"; core/activation_checkpoint.h).
  // A model that does not support a name returns an error naming it.
  virtual absl::Status EnableActivationCheckpointing(const std::vector<std::string>& submodules) {
    return absl::UnimplementedError(absl::StrCat(
        "activation checkpointing is not supported by this model (", name(), ")"));
  }

  // The annotations the model trains on and the number of classes it predicts, checked
  // against the datasets when the pipeline is built; nullopt states nothing (test models).
  virtual std::optional<TaskRequirements> DataRequirements() const { return std::nullopt; }

  // Where the whole model's weights came from when the plugin imported them as it was built
  // (e.g. a torchvision Mask R-CNN state dict named by its options' weights_path), for people to
  // read; empty when the model starts from initialised weights (a backbone's ImageNet weights
  // alone do not make a trained model). tools/eval and tools/infer run a model that imported its
  // weights without --checkpoint.
  virtual std::string ImportedWeights() const { return ""; }
};

using ModelRegistry = PluginRegistry<Model>;

}  // namespace vision::core

#endif  // VISION_CORE_MODEL_H_
