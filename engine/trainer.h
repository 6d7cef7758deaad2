// The training loop behind //tools:train, the same for every model: builds the pipeline
// through the registries, resumes from the newest loadable checkpoint, trains with gradient
// accumulation, mixed precision, loss scaling, clipping and EMA, communicates gradients with
// the configured strategy, evaluates (distributed) and checkpoints, and logs progress.
#ifndef VISION_ENGINE_TRAINER_H_
#define VISION_ENGINE_TRAINER_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/config/pipeline.pb.h"
#include "core/pipeline_builder.h"
#include "core/collectives.h"

namespace vision::engine {

struct TrainerOptions {
  // Resume even when the checkpoint's config fingerprint differs from this run's.
  bool allow_config_mismatch = false;
  // Print progress on rank 0 (tests turn it off).
  bool verbose = true;
  // This process's place on its node (from the launcher's environment): picks the CUDA
  // device and shares the node's cores between its processes.
  int local_rank = 0;
  int local_world_size = 1;
};

struct TrainResult {
  int64_t steps = 0;           // optimizer steps done by the end of the run
  int64_t resumed_from = -1;   // step of the checkpoint resumed from, -1 for a fresh start
  std::map<std::string, double> final_metrics;  // empty without an evaluator
  double images_per_second = 0;
};

class Trainer {
 public:
  // `collectives` outlives the trainer; core::SingleProcess for one process.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const core::TrainPipelineConfig& config,
                                                         core::Collectives* collectives,
                                                         TrainerOptions options);
  ~Trainer();

  absl::StatusOr<TrainResult> Run();

  // Evaluates the current (or EMA) weights on eval_data; every rank evaluates its share and
  // the metrics are computed over all of it on every rank.
  absl::StatusOr<std::map<std::string, double>> Evaluate();

  core::Model& model() { return *pipeline_.model; }

 private:
  // The training loop and its state (the trainer's implementation, kept out of this header).
  class Loop;
  Trainer(const core::TrainPipelineConfig& config, core::Collectives* collectives, TrainerOptions options,
          core::Pipeline pipeline);

  core::Pipeline pipeline_;
  std::unique_ptr<Loop> loop_;
};

}  // namespace vision::engine

#endif  // VISION_ENGINE_TRAINER_H_
