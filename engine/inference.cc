#include "engine/inference.h"

#include "core/pipeline_builder.h"
#include "core/status_macros.h"
#include "core/torch_guard.h"
#include "engine/device.h"
#include "engine/ema.h"

namespace vision::engine {

absl::StatusOr<InferenceModel> LoadModelForInference(const core::TrainPipelineConfig& config,
                                                     const std::string& checkpoint,
                                                     int local_rank) {
  InferenceModel loaded;
  VISION_ASSIGN_OR_RETURN(loaded.device, ResolveDevice(config.device(), local_rank));
  ConfigureDevice(loaded.device, config.cudnn_benchmark());
  VISION_ASSIGN_OR_RETURN(loaded.model, core::BuildModel(config.model()));
  std::unique_ptr<ModelEma> ema;
  if (config.train().ema_decay() > 0) {
    ema = std::make_unique<ModelEma>(*loaded.model, config.train().ema_decay());
  }
  VISION_RETURN_IF_ERROR(LoadCheckpoint(
      checkpoint, TrainingState{loaded.model.get(), nullptr, ema.get()}, &loaded.meta));
  VISION_RETURN_IF_ERROR(core::GuardTorch("moving the model to its device", [&] {
    if (ema) ema->Swap(*loaded.model);
    loaded.model->to(loaded.device);
    loaded.model->eval();
    return absl::OkStatus();
  }));
  return loaded;
}

}  // namespace vision::engine
