#include "engine/inference.h"

#include "absl/strings/str_cat.h"
#include "core/pipeline_builder.h"
#include "core/status_macros.h"
#include "core/torch_guard.h"
#include "engine/device.h"
#include "engine/ema.h"
#include "engine/memory_format.h"

namespace vision::engine {

absl::StatusOr<InferenceModel> LoadModelForInference(const core::TrainPipelineConfig& config,
                                                     const std::string& checkpoint,
                                                     int local_rank) {
  InferenceModel loaded;
  VISION_ASSIGN_OR_RETURN(loaded.device, ResolveDevice(config.device(), local_rank));
  ConfigureDevice(loaded.device, config);
  VISION_ASSIGN_OR_RETURN(loaded.model, core::BuildModel(config.model()));
  std::unique_ptr<ModelEma> ema;
  if (checkpoint.empty()) {
    loaded.weights = loaded.model->ImportedWeights();
    if (loaded.weights.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "no checkpoint given, and the config's model (", config.model().type(),
          ") imports no weights of a whole model, so it would run on initialised weights. Give "
          "--checkpoint=FILE (a checkpoint_N.pt or best.pt of a training run), or name published "
          "weights in the model's options (e.g. MaskRCNNOptions.weights_path: a torchvision Mask "
          "R-CNN state dict)"));
    }
  } else {
    if (config.train().ema_decay() > 0) {
      ema = std::make_unique<ModelEma>(*loaded.model, config.train().ema_decay());
    }
    VISION_RETURN_IF_ERROR(LoadCheckpoint(
        checkpoint, TrainingState{loaded.model.get(), nullptr, ema.get()}, &loaded.meta));
    loaded.weights = absl::StrCat(checkpoint, " (step ", loaded.meta.step, ")");
  }
  VISION_RETURN_IF_ERROR(core::GuardTorch("moving the model to its device", [&] {
    if (ema) ema->Swap(*loaded.model);
    loaded.model->to(loaded.device);
    if (config.memory_format() == core::TrainPipelineConfig::CHANNELS_LAST) {
      ToChannelsLast(*loaded.model);
    }
    loaded.model->eval();
    return absl::OkStatus();
  }));
  return loaded;
}

}  // namespace vision::engine
