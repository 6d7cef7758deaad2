#include "engine/hooks/builtin_hooks.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "core/model.h"
#include "core/optimizer.h"
#include "core/status_macros.h"
#include "core/trace.h"
#include "data/loader/loader.h"
#include "engine/checkpoint.h"
#include "engine/ema.h"
#include "engine/loss_scaler.h"

namespace vision::engine::hooks {

// --- TraceHook ---

absl::Status TraceHook::BeforeTrain(core::TrainingRun& run) {
  if (config_.num_steps() < 0 || config_.start_step() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("logging.trace: start_step (", config_.start_step(), ") and num_steps (",
                     config_.num_steps(), ") must be >= 0; num_steps: 0 turns tracing off"));
  }
  if (config_.num_steps() == 0) return absl::OkStatus();
  std::string dir = config_.path().empty() ? run.output_dir() : config_.path();
  if (dir.empty()) dir = ".";
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("logging.trace.path: cannot create '", dir, "': ", error.message()));
  }
  file_ = absl::StrCat(dir, "/trace_rank", run.rank(), ".json");
  return absl::OkStatus();
}

absl::Status TraceHook::BeforeStep(core::TrainingRun& run) {
  if (!file_.empty() && run.step() - run.first_step() == config_.start_step()) {
    core::trace::Start(run.rank());
    core::trace::NameThisThread("trainer");
  }
  return absl::OkStatus();
}

absl::Status TraceHook::AfterStep(core::TrainingRun& run, const core::StepValues&) {
  if (run.step() - run.first_step() == config_.start_step() + config_.num_steps()) {
    return Finish(run);
  }
  return absl::OkStatus();
}

// Training ended inside the trace window.
absl::Status TraceHook::AfterTrain(core::TrainingRun& run) { return Finish(run); }

// Ends the trace window: every rank writes its own file.
absl::Status TraceHook::Finish(core::TrainingRun& run) {
  if (!core::trace::Enabled()) return absl::OkStatus();
  core::trace::Stop();
  VISION_RETURN_IF_ERROR(core::trace::WriteChromeTrace(file_));
  run.Print(absl::StrCat("trace of ", config_.num_steps(), " step(s) written to ", file_,
                         " (every rank writes its own trace_rank<k>.json)"));
  return absl::OkStatus();
}

// --- EmaHook ---

absl::Status EmaHook::AfterStep(core::TrainingRun& run, const core::StepValues& values) {
  if (values.skipped.defined() && !values.skipped.is_cpu()) {
    ema_.UpdateUnless(run.model(), values.skipped);  // decided on the device
  } else if (values.OptimizerStepped()) {
    ema_.Update(run.model());
  }
  return absl::OkStatus();
}

absl::Status EmaHook::BeforeEvaluation(core::TrainingRun& run) {
  ema_.Swap(run.model());
  return absl::OkStatus();
}

absl::Status EmaHook::AfterEvaluation(core::TrainingRun& run,
                                      const std::map<std::string, double>*) {
  ema_.Swap(run.model());
  return absl::OkStatus();
}

// --- ProgressHook ---

ProgressHook::ProgressHook(int64_t every_n_steps, int64_t images_per_step,
                           core::Optimizer* optimizer, const LossScaler* scaler,
                           const data::DataLoader* loader)
    : every_n_steps_(every_n_steps),
      images_per_step_(images_per_step),
      optimizer_(*optimizer),
      scaler_(*scaler),
      loader_(*loader) {}

absl::Status ProgressHook::BeforeTrain(core::TrainingRun&) {
  start_ = window_start_ = Clock::now();
  window_wait_ = loader_.wait_seconds();
  window_steps_ = 0;
  return absl::OkStatus();
}

bool ProgressHook::WantsStepValues(const core::TrainingRun& run) const {
  const int64_t next = run.step() + 1;
  return next % every_n_steps_ == 0 || next == run.total_steps();
}

absl::Status ProgressHook::AfterStep(core::TrainingRun& run, const core::StepValues& values) {
  ++window_steps_;
  estimator_.AddStep(values.seconds);
  const int64_t step = run.step();
  if (!(step % every_n_steps_ == 0 || step == run.total_steps()) || !values.has_values) {
    return absl::OkStatus();
  }
  const auto seconds_since = [](Clock::time_point since) {
    return std::chrono::duration<double>(Clock::now() - since).count();
  };
  const double window_seconds = std::max(seconds_since(window_start_), 1e-9);
  const double lr = optimizer_.lr(0);
  logging::ProgressLine line;
  line.step = step;
  line.total_steps = run.total_steps();
  line.loss = values.loss;
  for (const auto& [name, value] : values.loss_terms) line.loss_terms.emplace_back(name, value);
  line.lr = lr;
  line.images_per_second = window_steps_ * images_per_step_ / window_seconds;
  line.data_wait_fraction =
      std::clamp((loader_.wait_seconds() - window_wait_) / window_seconds, 0.0, 1.0);
  line.elapsed_seconds = seconds_since(start_);
  line.eta_seconds = estimator_.EtaSeconds(run.total_steps() - step);
  line.skipped_samples = values.skipped_samples;
  run.Print(logging::FormatProgressLine(line));
  std::map<std::string, double> scalars = values.loss_terms;
  scalars["loss"] = values.loss;
  scalars["lr"] = lr;
  scalars["grad_norm"] = values.grad_norm;
  scalars["images_per_second"] = line.images_per_second;
  scalars["data_wait_fraction"] = line.data_wait_fraction;
  if (scaler_.enabled()) scalars["loss_scale"] = scaler_.scale();
  scalars["skipped_steps"] = static_cast<double>(scaler_.skipped_steps());
  VISION_RETURN_IF_ERROR(run.LogScalars(scalars));
  window_start_ = Clock::now();
  window_wait_ = loader_.wait_seconds();
  window_steps_ = 0;
  return absl::OkStatus();
}

// --- EvaluationHook ---

absl::Status EvaluationHook::AfterStep(core::TrainingRun& run, const core::StepValues&) {
  const int64_t step = run.step();
  const bool last = step == run.total_steps();
  if (!((every_n_steps_ > 0 && step % every_n_steps_ == 0) || last)) return absl::OkStatus();
  using Metrics = std::map<std::string, double>;
  VISION_ASSIGN_OR_RETURN(Metrics metrics, run.Evaluate());
  const std::string main_metric = run.main_metric();
  auto found = metrics.find(main_metric);
  if (found == metrics.end()) {
    return absl::InternalError(
        absl::StrCat("the evaluator computed no '", main_metric, "' metric"));
  }
  const double value = found->second;
  outcome_.step = step;
  outcome_.is_best = !best_.has_best_metric || value > best_.best_metric;
  if (outcome_.is_best) {
    best_.has_best_metric = true;
    best_.best_metric = value;
    best_.best_metric_step = step;
  }
  std::map<std::string, double> scalars;
  for (const auto& [name, v] : metrics) scalars["eval/" + name] = v;
  outcome_.metrics = std::move(metrics);
  return run.LogScalars(scalars);
}

// --- CheckpointHook ---

absl::Status CheckpointHook::AfterStep(core::TrainingRun& run, const core::StepValues&) {
  const int64_t step = run.step();
  const bool last = step == run.total_steps() || run.stop_requested();
  if (!(last || (every_n_steps_ > 0 && step % every_n_steps_ == 0))) return absl::OkStatus();
  return save_(outcome_.step == step && outcome_.is_best);
}

}  // namespace vision::engine::hooks
