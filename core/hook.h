// The training-hook family: behaviour added to the training loop without editing it
// (detectron2's HookBase, MMEngine's Hook). The loop (engine/trainer.cc) is a short spine that
// runs optimizer steps and calls every hook at these points, in this order per step:
//
//   BeforeTrain                          once, after set-up and resume
//   loop:  BeforeStep                    before optimizer step step()+1
//          (the step: forward, backward, gradient communication, optimizer)
//          AfterStep                     step() now counts the step just done
//            (an evaluation started by a hook calls BeforeEvaluation / AfterEvaluation)
//   AfterTrain                           once, when the last step or a stop request is reached
//
// The loop's own behaviour is built from hooks too (engine/hooks/builtin_hooks.h): the trace
// window, the EMA, the progress log and TensorBoard scalars, evaluation with best-metric
// tracking, and checkpoints, in that order; hooks named in the config's `hooks` follow them,
// in the config's order, and the checkpoint hook comes last so that it sees their stop
// requests. Every hook runs on every rank: a hook that calls a collective (an evaluation, an
// all-reduce) must do so on every rank, and decisions that end training must be taken from
// values that are the same on every rank (the step, evaluation metrics, the logged loss,
// which is averaged over ranks), or the ranks part ways and their collectives time out.
//
// A hook plugin: a class deriving from core::Hook with
//   static absl::StatusOr<std::unique_ptr<MyHook>> Create(const MyHookOptions&);
// and one line at the bottom of its .cc:
//   VISION_REGISTER_PLUGIN(core::HookRegistry, "MyHook", MyHook, MyHookOptions);
// named in the config as  hooks { type: "MyHook" options { [type.googleapis.com/...] { } } }.
#ifndef VISION_CORE_HOOK_H_
#define VISION_CORE_HOOK_H_

#include <cstdint>
#include <map>
#include <string>

#include <ATen/core/Tensor.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/plugin.h"

namespace vision::core {

class Model;
class TrainPipelineConfig;

// The running training job as a hook sees it.
class TrainingRun {
 public:
  virtual ~TrainingRun() = default;

  virtual const TrainPipelineConfig& config() const = 0;
  // Optimizer steps done so far (in AfterStep: including the step just done).
  virtual int64_t step() const = 0;
  // The step the run ends at, and the step this process started from (0, or a resume's step).
  virtual int64_t total_steps() const = 0;
  virtual int64_t first_step() const = 0;
  virtual int64_t epoch() const = 0;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // checkpoint.output_dir: where the run writes its files.
  virtual const std::string& output_dir() const = 0;
  // The model being trained (its live weights; during an evaluation, the weights evaluated).
  virtual Model& model() = 0;
  // The name of the evaluator's main metric ("hmean", "mask_AP"), empty without an evaluator.
  virtual std::string main_metric() const = 0;

  // A line of progress on rank 0's standard output (other ranks: nothing).
  virtual void Print(const std::string& line) const = 0;
  // Scalars at the current step in the run's logs (metrics.jsonl, TensorBoard), by rank 0.
  virtual absl::Status LogScalars(const std::map<std::string, double>& values) = 0;
  // Evaluates the current weights (EMA weights where the run keeps them) on eval_data, over
  // every rank: call on every rank at the same step. The metrics are equal on every rank.
  virtual absl::StatusOr<std::map<std::string, double>> Evaluate() = 0;
  // Ends training after the hooks of the current step have run; a final checkpoint is written.
  // Request it on every rank at the same step (see the top of this file).
  virtual void RequestStop(const std::string& reason) = 0;
  virtual bool stop_requested() const = 0;
};

// What a step computed. The loss values are on the host only for steps some hook asked for
// (Hook::WantsStepValues), since copying them costs a device synchronisation.
struct StepValues {
  bool has_values = false;
  // The weighted total loss and each weighted loss term, averaged over accumulation steps
  // and over ranks; the global gradient norm before clipping.
  double loss = 0;
  std::map<std::string, double> loss_terms;
  double grad_norm = 0;
  // Bad samples skipped by the training loaders so far, summed over ranks.
  int64_t skipped_samples = 0;
  // Always set: 0-dim float32, 1 when the step was skipped for non-finite gradients, 0 when the
  // optimizer stepped. On the host, or, where the optimizer skips on the device (SGD stepped by
  // the FUSED implementation, the default on CUDA), on the device, so that the step needs no
  // synchronisation: there, OptimizerStepped() waits for it; a hook that can act on the device
  // uses the tensor (EmaHook).
  at::Tensor skipped;
  bool OptimizerStepped() const { return skipped.defined() && skipped.item<float>() == 0.0f; }
  // The step's wall time on this rank.
  double seconds = 0;
};

class Hook {
 public:
  static constexpr char kFamily[] = "hook";
  virtual ~Hook() = default;

  virtual absl::Status BeforeTrain(TrainingRun& run) { return absl::OkStatus(); }
  // Whether the coming step (run.step() + 1) should bring its loss values to the host.
  // Must give the same answer on every rank (it decides a collective).
  virtual bool WantsStepValues(const TrainingRun& run) const { return false; }
  virtual absl::Status BeforeStep(TrainingRun& run) { return absl::OkStatus(); }
  virtual absl::Status AfterStep(TrainingRun& run, const StepValues& values) {
    return absl::OkStatus();
  }
  virtual absl::Status BeforeEvaluation(TrainingRun& run) { return absl::OkStatus(); }
  // `metrics` is null when the evaluation failed (its error is returned after every hook ran),
  // so that a hook that changed the model in BeforeEvaluation can always undo it.
  virtual absl::Status AfterEvaluation(TrainingRun& run,
                                       const std::map<std::string, double>* metrics) {
    return absl::OkStatus();
  }
  virtual absl::Status AfterTrain(TrainingRun& run) { return absl::OkStatus(); }

  // What a resumed run needs to continue as an uninterrupted one would (an early stop's count
  // of evaluations without improvement): saved in every checkpoint, given back to LoadState
  // before BeforeTrain when the run resumes. Default: nothing.
  virtual std::string SaveState() const { return ""; }
  virtual absl::Status LoadState(const std::string& state) { return absl::OkStatus(); }
};

using HookRegistry = PluginRegistry<Hook>;

}  // namespace vision::core

#endif  // VISION_CORE_HOOK_H_
