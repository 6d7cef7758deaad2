// The training loop's own behaviour, as hooks (core/hook.h), in the order the trainer calls
// them: the trace window, the EMA, the progress log, evaluation with best-metric tracking, and
// checkpoints. The trainer builds them from the config's logging, train, evaluation and
// checkpoint sections; hooks named in the config run after these and before the checkpoint
// hook. Each hook only reads the parts of the run it is given at construction.
#ifndef VISION_ENGINE_HOOKS_BUILTIN_HOOKS_H_
#define VISION_ENGINE_HOOKS_BUILTIN_HOOKS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "core/config/pipeline.pb.h"
#include "core/hook.h"
#include "engine/logging/progress.h"

namespace vision::core {
class Optimizer;
}  // namespace vision::core
namespace vision::data {
class DataLoader;
}  // namespace vision::data

namespace vision::engine {

class LossScaler;
class ModelEma;
struct CheckpointMeta;

namespace hooks {

// logging.trace: a per-rank timeline of steps [start_step, start_step + num_steps) of this
// run, written to <path or output_dir>/trace_rank<k>.json when the window ends or training
// does. Refuses a negative window (the config validator does too).
class TraceHook : public core::Hook {
 public:
  explicit TraceHook(const core::TraceConfig& config) : config_(config) {}
  absl::Status BeforeTrain(core::TrainingRun& run) override;
  absl::Status BeforeStep(core::TrainingRun& run) override;
  absl::Status AfterStep(core::TrainingRun& run, const core::StepValues& values) override;
  absl::Status AfterTrain(core::TrainingRun& run) override;

 private:
  absl::Status Finish(core::TrainingRun& run);
  core::TraceConfig config_;
  std::string file_;
};

// train.ema_decay: updates the average after every optimizer step that was taken, and swaps
// the averaged weights in for evaluation (and back afterwards, also when it failed).
class EmaHook : public core::Hook {
 public:
  explicit EmaHook(ModelEma* ema) : ema_(*ema) {}
  absl::Status AfterStep(core::TrainingRun& run, const core::StepValues& values) override;
  absl::Status BeforeEvaluation(core::TrainingRun& run) override;
  absl::Status AfterEvaluation(core::TrainingRun& run,
                               const std::map<std::string, double>* metrics) override;

 private:
  ModelEma& ema_;
};

// logging.every_n_steps: rank 0's progress line (loss, its terms, lr, images/s, data wait,
// ETA) and the scalars in metrics.jsonl and TensorBoard, every n steps and at the last one.
class ProgressHook : public core::Hook {
 public:
  // `images_per_step`: the global batch; the others outlive the hook.
  ProgressHook(int64_t every_n_steps, int64_t images_per_step, core::Optimizer* optimizer,
               const LossScaler* scaler, const data::DataLoader* loader);
  absl::Status BeforeTrain(core::TrainingRun& run) override;
  bool WantsStepValues(const core::TrainingRun& run) const override;
  absl::Status AfterStep(core::TrainingRun& run, const core::StepValues& values) override;

 private:
  using Clock = std::chrono::steady_clock;
  int64_t every_n_steps_;
  int64_t images_per_step_;
  core::Optimizer& optimizer_;
  const LossScaler& scaler_;
  const data::DataLoader& loader_;
  logging::StepTimeEstimator estimator_;
  Clock::time_point start_;
  Clock::time_point window_start_;
  double window_wait_ = 0;
  int64_t window_steps_ = 0;
};

// What the last evaluation of the run gave: the evaluation hook writes it, the checkpoint hook
// and the trainer's result read it.
struct EvaluationOutcome {
  int64_t step = -1;     // step of the last evaluation, -1 before the first
  bool is_best = false;  // its main metric beat every earlier one
  std::map<std::string, double> metrics;
};

// evaluation.every_n_steps: evaluates every n steps (0: only at the end) and at the last
// step, tracks the best main metric in `best` (checkpointed, so a resumed run continues it)
// and logs the metrics as eval/<name>.
class EvaluationHook : public core::Hook {
 public:
  EvaluationHook(int64_t every_n_steps, CheckpointMeta* best, EvaluationOutcome* outcome)
      : every_n_steps_(every_n_steps), best_(*best), outcome_(*outcome) {}
  absl::Status AfterStep(core::TrainingRun& run, const core::StepValues& values) override;

 private:
  int64_t every_n_steps_;
  CheckpointMeta& best_;
  EvaluationOutcome& outcome_;
};

// checkpoint.every_n_steps: saves every n steps, at the last step and when a hook stopped
// training; best.pt when this step's evaluation was the best so far.
class CheckpointHook : public core::Hook {
 public:
  using SaveFunction = std::function<absl::Status(bool is_best)>;
  CheckpointHook(int64_t every_n_steps, const EvaluationOutcome* outcome, SaveFunction save)
      : every_n_steps_(every_n_steps), outcome_(*outcome), save_(std::move(save)) {}
  absl::Status AfterStep(core::TrainingRun& run, const core::StepValues& values) override;

 private:
  int64_t every_n_steps_;
  const EvaluationOutcome& outcome_;
  SaveFunction save_;
};

}  // namespace hooks
}  // namespace vision::engine

#endif  // VISION_ENGINE_HOOKS_BUILTIN_HOOKS_H_
