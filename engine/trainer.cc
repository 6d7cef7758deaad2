#include "engine/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/config/loader.h"
#include "core/status_macros.h"
#include "core/status_util.h"
#include "core/torch_guard.h"
#include "core/trace.h"
#include "data/loader/loader.h"
#include "distributed/sampler/distributed_sampler.h"
#include "distributed/sync_batchnorm/sync_batch_norm.h"
#include "engine/autocast.h"
#include "engine/checkpoint.h"
#include "engine/device.h"
#include "engine/ema.h"
#include "engine/evaluation.h"
#include "engine/logging/metrics_log.h"
#include "engine/logging/progress.h"
#include "engine/logging/tensorboard_writer.h"
#include "engine/hooks/builtin_hooks.h"
#include "engine/loss_scaler.h"
#include "engine/optimizer_step.h"
#include "engine/memory_format.h"
#include "engine/draw.h"

namespace vision::engine {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

std::vector<const core::Augmentation*> Pointers(
    const std::vector<std::unique_ptr<core::Augmentation>>& augmentations) {
  std::vector<const core::Augmentation*> out;
  for (const auto& a : augmentations) out.push_back(a.get());
  return out;
}

}  // namespace

// The loop and its state. It is the hooks' view of the run (core::TrainingRun), and calls them
// at the points listed in core/hook.h.
class Trainer::Loop : public core::TrainingRun {
 public:
  Loop(const core::TrainPipelineConfig& config, core::Collectives* collectives, TrainerOptions options,
       core::Pipeline& pipeline)
      : config_(config),
        collectives_(*collectives),
        options_(options),
        p_(pipeline),
        scaler_(ScalerOptions(config.mixed_precision())),
        checkpoints_(config.checkpoint().output_dir(), config.checkpoint().keep_last(),
                     config.checkpoint().keep_best()) {}

  absl::Status Init();
  absl::StatusOr<TrainResult> Run();

  // core::TrainingRun
  const core::TrainPipelineConfig& config() const override { return config_; }
  int64_t step() const override { return state_.step; }
  int64_t total_steps() const override { return total_steps_; }
  int64_t first_step() const override { return first_step_; }
  int64_t epoch() const override { return state_.epoch; }
  int rank() const override { return collectives_.rank(); }
  int world_size() const override { return collectives_.world_size(); }
  const std::string& output_dir() const override { return checkpoints_.dir(); }
  core::Model& model() override { return *p_.model; }
  std::string main_metric() const override {
    return p_.evaluator == nullptr ? "" : p_.evaluator->MainMetric();
  }
  void Print(const std::string& line) const override {
    if (is_main() && options_.verbose) std::printf("%s\n", line.c_str()), std::fflush(stdout);
  }
  absl::Status LogScalars(const std::map<std::string, double>& values) override;
  absl::StatusOr<std::map<std::string, double>> Evaluate() override;
  void RequestStop(const std::string& reason) override;
  bool stop_requested() const override { return !stop_reason_.empty(); }

 private:
  static LossScalerOptions ScalerOptions(const core::MixedPrecisionConfig& mp) {
    LossScalerOptions o;
    o.enabled = mp.has_loss_scaling() ? mp.loss_scaling()
                                      : mp.enabled() && mp.dtype() == core::MixedPrecisionConfig::FLOAT16;
    o.init_scale = mp.init_scale();
    o.growth_factor = mp.growth_factor();
    o.backoff_factor = mp.backoff_factor();
    o.growth_interval = mp.growth_interval();
    return o;
  }
  bool is_main() const { return collectives_.rank() == 0; }
  absl::Status SetUpProcess();
  absl::Status CheckRanksRunOneConfig();
  absl::Status SetUpModel();
  absl::Status SetUpData();
  absl::Status OpenLogs();
  absl::Status Resume();
  absl::Status SetUpReplicas();
  absl::Status SetUpHooks();
  absl::Status StartEpoch(int64_t epoch, int64_t first_batch);
  absl::StatusOr<core::Batch> NextTrainBatch();
  absl::Status TrainStep(core::StepValues* values);
  // The error that ends a run after more than max_consecutive_nonfinite_steps skipped steps.
  absl::Status NonFiniteStreakError() const;
  // Reads the streak counted on the device (where steps are skipped there) into the state and
  // returns NonFiniteStreakError when it is too long.
  absl::Status CheckNonFiniteStreak();
  absl::Status AverageOverRanks(core::StepValues* values);
  // Calls `point` on every hook in order; stops at the first error.
  absl::Status CallHooks(const std::function<absl::Status(core::Hook&)>& point);
  absl::StatusOr<TrainResult> Summarize(double seconds);
  absl::Status SaveCheckpoint(bool is_best);

  const core::TrainPipelineConfig config_;
  core::Collectives& collectives_;
  TrainerOptions options_;
  core::Pipeline& p_;
  c10::Device device_{c10::DeviceType::CPU};
  std::vector<at::Tensor> params_;
  std::vector<std::string> param_names_;
  std::unique_ptr<distributed::sampler::DistributedSampler> sampler_;
  std::unique_ptr<data::DataLoader> train_loader_;
  LossScaler scaler_;
  // Consecutive skipped steps, 0-dim int64 on the device, where the optimizer skips there.
  at::Tensor nonfinite_streak_;
  std::unique_ptr<ModelEma> ema_;
  CheckpointManager checkpoints_;
  CheckpointMeta state_;
  int64_t batches_per_epoch_ = 0;
  int64_t total_steps_ = 0;
  int64_t resumed_from_ = -1;
  std::unique_ptr<logging::MetricsLog> metrics_log_;
  std::unique_ptr<logging::TensorBoardWriter> tensorboard_;
  bool draw_predictions_ = true;
  int64_t first_step_ = 0;
  std::string stop_reason_;
  hooks::EvaluationOutcome evaluation_;
  std::vector<std::unique_ptr<core::Hook>> builtin_hooks_;
  std::vector<core::Hook*> hooks_;  // the built-in ones and the config's, in calling order
};

absl::Status Trainer::Loop::Init() {
  VISION_RETURN_IF_ERROR(SetUpProcess());
  VISION_RETURN_IF_ERROR(CheckRanksRunOneConfig());
  VISION_RETURN_IF_ERROR(SetUpModel());
  VISION_RETURN_IF_ERROR(SetUpData());
  VISION_RETURN_IF_ERROR(OpenLogs());
  VISION_RETURN_IF_ERROR(SetUpHooks());
  VISION_RETURN_IF_ERROR(Resume());
  return SetUpReplicas();
}

// The loop's own hooks (engine/hooks/builtin_hooks.h) around the config's: trace, EMA,
// progress, evaluation, the config's hooks, checkpoints.
absl::Status Trainer::Loop::SetUpHooks() {
  auto add = [this](std::unique_ptr<core::Hook> hook) {
    hooks_.push_back(hook.get());
    builtin_hooks_.push_back(std::move(hook));
  };
  add(std::make_unique<hooks::TraceHook>(config_.logging().trace()));
  if (ema_) add(std::make_unique<hooks::EmaHook>(ema_.get()));
  add(std::make_unique<hooks::ProgressHook>(config_.logging().every_n_steps(),
                                            p_.global_batch_size, p_.optimizer.get(), &scaler_,
                                            train_loader_.get()));
  if (p_.evaluator != nullptr) {
    add(std::make_unique<hooks::EvaluationHook>(config_.evaluation().every_n_steps(), &state_,
                                                &evaluation_));
  }
  for (const auto& hook : p_.hooks) hooks_.push_back(hook.get());
  add(std::make_unique<hooks::CheckpointHook>(config_.checkpoint().every_n_steps(), &evaluation_,
                                              [this](bool is_best) { return SaveCheckpoint(is_best); }));
  return absl::OkStatus();
}

absl::Status Trainer::Loop::CallHooks(const std::function<absl::Status(core::Hook&)>& point) {
  for (core::Hook* hook : hooks_) VISION_RETURN_IF_ERROR(point(*hook));
  return absl::OkStatus();
}

void Trainer::Loop::RequestStop(const std::string& reason) {
  if (stop_reason_.empty()) stop_reason_ = reason.empty() ? "a hook requested it" : reason;
}

// Threads, device and its switches.
absl::Status Trainer::Loop::SetUpProcess() {
  int threads = config_.train().intra_op_threads();
  if (threads <= 0) {
    threads = std::max(1u, std::thread::hardware_concurrency()) /
              std::max(1, options_.local_world_size);
    threads = std::max(1, threads);
  }
  at::set_num_threads(threads);
  VISION_ASSIGN_OR_RETURN(device_, ResolveDevice(config_.device(), options_.local_rank));
  ConfigureDevice(device_, config_);
  return absl::OkStatus();
}

// Every rank must run the same config: compare fingerprints before any other collective.
absl::Status Trainer::Loop::CheckRanksRunOneConfig() {
  const std::string fingerprint = core::ConfigFingerprint(config_);
  VISION_ASSIGN_OR_RETURN(std::vector<std::string> fingerprints, collectives_.AllGather(fingerprint));
  std::vector<std::string> differing;
  for (size_t r = 0; r < fingerprints.size(); ++r) {
    if (fingerprints[r] != fingerprints[0]) differing.push_back(absl::StrCat("rank ", r, " has ", fingerprints[r]));
  }
  if (!differing.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ranks disagree on the config (rank 0 has fingerprint ", fingerprints[0], "; ",
        absl::StrJoin(differing, ", "), "): start every rank with the same --config and --override"));
  }
  return absl::OkStatus();
}

// The model on its device, with SyncBatchNorm, activation checkpointing and the EMA as configured.
absl::Status Trainer::Loop::SetUpModel() {
  p_.model->to(device_);
  if (config_.distributed().sync_batchnorm()) {
    if (collectives_.world_size() > 1) {
      VISION_ASSIGN_OR_RETURN(int synchronized, distributed::sync_batchnorm::ConvertSyncBatchNorm(
                                                    *p_.model, collectives_.group()));
      Print(absl::StrCat("SyncBatchNorm: ", synchronized, " normalisation layers synchronised over ",
                         collectives_.world_size(), " ranks"));
    } else {
      Print("SyncBatchNorm: one process, keeping plain BatchNorm");
    }
  }
  if (config_.train().activation_checkpointing_size() > 0) {
    const std::vector<std::string> names(config_.train().activation_checkpointing().begin(),
                                         config_.train().activation_checkpointing().end());
    VISION_RETURN_IF_ERROR(core::WithContext("train.activation_checkpointing",
                                             p_.model->EnableActivationCheckpointing(names)));
    Print(absl::StrCat("activation checkpointing: ", absl::StrJoin(names, ", ")));
  }
  if (config_.cpu_convolution() == core::TrainPipelineConfig::WINOGRAD) {
    Print(device_.is_cpu()
              ? "cpu convolution: Winograd F(4x4, 3x3) for the 3x3 stride-1 layers, dilated too"
              : "cpu convolution: WINOGRAD has no effect on a CUDA device");
  }
  if (config_.memory_format() == core::TrainPipelineConfig::CHANNELS_LAST) {
    const int converted = ToChannelsLast(*p_.model);
    Print(absl::StrCat("memory format: channels-last (", converted,
                       " weight and buffer tensors, and the images)"));
  }
  for (const auto& param : p_.model->named_parameters()) {
    if (!param.value().requires_grad()) continue;
    params_.push_back(param.value());
    param_names_.push_back(param.key());
  }
  if (config_.train().ema_decay() > 0) {
    ema_ = std::make_unique<ModelEma>(*p_.model, config_.train().ema_decay());
  }
  return absl::OkStatus();
}

// This rank's share of the training data, and the length of training.
absl::Status Trainer::Loop::SetUpData() {
  const core::TrainLoopConfig& t = config_.train();
  const core::LoaderConfig& lc = config_.train_data().loader();
  distributed::sampler::DistributedSamplerOptions so;
  so.dataset_size = p_.train_dataset->Size();
  so.rank = collectives_.rank();
  so.world_size = collectives_.world_size();
  so.shuffle = lc.shuffle();
  so.seed = config_.seed();
  so.drop_last = lc.drop_last();
  VISION_ASSIGN_OR_RETURN(distributed::sampler::DistributedSampler sampler,
                          distributed::sampler::DistributedSampler::Create(so));
  sampler_ = std::make_unique<distributed::sampler::DistributedSampler>(std::move(sampler));
  const int64_t per_rank = sampler_->NumSamples();
  const data::LoaderOptions loader_options =
      LoaderOptionsFromConfig(lc, config_.seed(), !device_.is_cpu());
  batches_per_epoch_ = data::NumBatches(loader_options, per_rank);
  const int accumulation = t.gradient_accumulation_steps();
  if (batches_per_epoch_ < accumulation) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "train_data: %d samples give %d batches of %d per rank and epoch over %d ranks, fewer "
        "than train.gradient_accumulation_steps (%d): use a smaller batch_size or more data",
        p_.train_dataset->Size(), batches_per_epoch_, lc.batch_size(), collectives_.world_size(),
        accumulation));
  }
  total_steps_ = t.has_max_steps() ? t.max_steps() : t.max_epochs() * (batches_per_epoch_ / accumulation);
  train_loader_ =
      std::make_unique<data::DataLoader>(*p_.train_dataset, Pointers(p_.train_augmentations),
                                         p_.model->MakeTargetGenerator(), loader_options);
  return absl::OkStatus();
}

// Metrics and TensorBoard logs, written by rank 0.
absl::Status Trainer::Loop::OpenLogs() {
  if (!is_main()) return absl::OkStatus();
  const std::string dir = config_.checkpoint().output_dir();
  if (config_.logging().jsonl()) {
    VISION_ASSIGN_OR_RETURN(metrics_log_, logging::MetricsLog::Open(dir));
  }
  if (config_.logging().tensorboard()) {
    VISION_ASSIGN_OR_RETURN(tensorboard_, logging::TensorBoardWriter::Create(dir + "/tensorboard"));
  }
  return absl::OkStatus();
}

// Identical replicas from the same step on every rank, and gradient communication.
absl::Status Trainer::Loop::SetUpReplicas() {
  // Every rank must continue from the same step, or their collectives stop matching.
  VISION_ASSIGN_OR_RETURN(std::vector<std::string> steps,
                          collectives_.AllGather(absl::StrCat(resumed_from_)));
  for (size_t r = 1; r < steps.size(); ++r) {
    if (steps[r] != steps[0]) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank 0 resumes from step ", steps[0], " but rank ", r, " from step ", steps[r],
          " (-1: no checkpoint found): checkpoint.output_dir (", checkpoints_.dir(),
          ") must be one directory that every node sees, e.g. on a shared file system"));
    }
  }

  // Identical replicas: rank 0's parameters and buffers everywhere (after a resume, too).
  std::vector<at::Tensor> tensors;
  for (const at::Tensor& t : p_.model->parameters()) tensors.push_back(t.detach());
  for (const at::Tensor& b : p_.model->buffers()) tensors.push_back(b.detach());
  VISION_RETURN_IF_ERROR(collectives_.Broadcast(tensors, 0));
  if (collectives_.world_size() > 1) {
    if (p_.comm_strategy == nullptr) {
      // Several replicas must never train apart silently: default to overlapped buckets.
      Print("distributed.strategy not set: using \"bucketed\" with its default options");
      VISION_ASSIGN_OR_RETURN(p_.comm_strategy,
                              core::CommStrategyRegistry::Get().Create("bucketed", google::protobuf::Any()));
    }
    VISION_RETURN_IF_ERROR(p_.comm_strategy->Attach(params_, param_names_, collectives_.group()));
  }
  return absl::OkStatus();
}

absl::Status Trainer::Loop::Resume() {
  if (!config_.checkpoint().auto_resume()) return absl::OkStatus();
  // Where a run lives does not change what it computes: a moved or copied run directory resumes.
  auto without_location = [](core::TrainPipelineConfig c) {
    c.mutable_checkpoint()->clear_output_dir();
    return c;
  };
  const core::TrainPipelineConfig current = without_location(config_);
  std::vector<std::string> warnings;
  auto accept = [&](const std::string& path, const CheckpointMeta& meta) -> absl::Status {
    core::TrainPipelineConfig saved;
    if (!core::MergeConfigText(meta.config_text, path, &saved).ok()) {
      return absl::DataLossError(absl::StrCat("checkpoint '", path, "': its config does not parse"));
    }
    saved = without_location(saved);
    if (core::ConfigFingerprint(saved) == core::ConfigFingerprint(current) ||
        options_.allow_config_mismatch) {
      return absl::OkStatus();
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint '", path, "' was written with another config. Differences (checkpoint -> "
        "this run):\n", core::ConfigDifferences(saved, current),
        "Use another checkpoint.output_dir, or pass --allow_config_mismatch to resume anyway."));
  };
  absl::StatusOr<std::optional<CheckpointMeta>> restored = checkpoints_.RestoreLatest(
      TrainingState{p_.model.get(), &p_.optimizer->torch_optimizer(), ema_.get()}, accept, &warnings);
  for (const std::string& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  if (!restored.ok()) return restored.status();
  if (!restored->has_value()) return absl::OkStatus();
  state_ = **restored;
  scaler_.LoadState(state_.loss_scaler_state);
  // The config's hooks continue where they were (an early stop's count of evaluations).
  if (state_.hook_states.size() == p_.hooks.size()) {
    for (size_t i = 0; i < p_.hooks.size(); ++i) {
      VISION_RETURN_IF_ERROR(core::WithContext(absl::StrCat("hooks[", i, "] (resuming)"),
                                               p_.hooks[i]->LoadState(state_.hook_states[i])));
    }
  } else {
    std::fprintf(stderr, "warning: the checkpoint holds the state of %zu hooks, the config names "
                 "%zu: the config's hooks start afresh\n", state_.hook_states.size(), p_.hooks.size());
  }
  resumed_from_ = state_.step;
  Print(absl::StrFormat("resumed from step %d (epoch %d, batch %d) in %s", state_.step,
                        state_.epoch, state_.batch_in_epoch, checkpoints_.dir()));
  return absl::OkStatus();
}

absl::Status Trainer::Loop::StartEpoch(int64_t epoch, int64_t first_batch) {
  state_.epoch = epoch;
  state_.batch_in_epoch = first_batch;
  train_loader_->StartEpoch(epoch, sampler_->Indices(epoch), first_batch);
  return absl::OkStatus();
}

absl::StatusOr<core::Batch> Trainer::Loop::NextTrainBatch() {
  while (true) {
    VISION_ASSIGN_OR_RETURN(std::optional<core::Batch> batch, train_loader_->Next());
    if (batch.has_value()) {
      ++state_.batch_in_epoch;
      batch->To(device_);
      if (config_.memory_format() == core::TrainPipelineConfig::CHANNELS_LAST) {
        batch->images = ImagesToChannelsLast(batch->images);
      }
      return std::move(*batch);
    }
    VISION_RETURN_IF_ERROR(StartEpoch(state_.epoch + 1, 0));
  }
}

absl::Status Trainer::Loop::TrainStep(core::StepValues* values) {
  const core::TrainLoopConfig& t = config_.train();
  const int accumulation = t.gradient_accumulation_steps();
  const core::MixedPrecisionConfig& mp = config_.mixed_precision();
  const at::ScalarType dtype =
      mp.dtype() == core::MixedPrecisionConfig::FLOAT16 ? at::kHalf : at::kBFloat16;
  const bool want_values = values->has_values;
  p_.model->train();
  at::Tensor total_for_log = at::zeros({}, at::kDouble);
  for (int micro = 0; micro < accumulation; ++micro) {
    const int64_t wait_us = core::trace::Enabled() ? core::trace::NowUs() : 0;
    VISION_ASSIGN_OR_RETURN(core::Batch batch, NextTrainBatch());
    if (core::trace::Enabled()) {
      core::trace::Record("data_wait", "step", wait_us, core::trace::NowUs(),
                          core::trace::ThreadLane());
    }
    const bool sync = micro == accumulation - 1;
    if (p_.comm_strategy != nullptr && collectives_.world_size() > 1) {
      p_.comm_strategy->PrepareBackward(sync);
    }
    at::Tensor total;
    {
      core::trace::ScopedSpan span("forward", "step");
      AutocastScope autocast(mp.enabled(), device_.type(), dtype);
      std::map<std::string, at::Tensor> losses = p_.model->Losses(batch);
      if (losses.empty()) return absl::InternalError("the model returned no losses");
      for (const auto& [name, loss] : losses) {
        auto w = t.loss_weights().find(name);
        const double weight = w == t.loss_weights().end() ? 1.0 : w->second;
        at::Tensor term = loss.to(at::kFloat) * weight;
        total = total.defined() ? total + term : term;
        if (want_values) values->loss_terms[name] += term.item<double>() / accumulation;
      }
    }
    total = total / accumulation;
    if (want_values) total_for_log += total.detach().to(at::kCPU, at::kDouble);
    core::trace::ScopedSpan span("backward", "step");
    scaler_.Scale(total).backward();
  }
  if (p_.comm_strategy != nullptr && collectives_.world_size() > 1) {
    core::trace::ScopedSpan span("finish_backward", "step");
    VISION_RETURN_IF_ERROR(p_.comm_strategy->FinishBackward());
  }
  core::trace::ScopedSpan optimizer_span("optimizer", "step");
  // Gradients are identical on every rank now, so every rank takes the same decision.
  p_.optimizer->SetLrFactor(p_.lr_schedule->Factor(state_.step, total_steps_));
  OptimizerPhaseOptions phase;
  phase.clip_grad_norm = t.clip_grad_norm();
  phase.want_grad_norm = want_values;
  const OptimizerPhaseResult result = RunOptimizerPhase(params_, scaler_, *p_.optimizer, phase);
  values->skipped = result.skipped;
  if (!result.decided_on_device) {
    if (result.skipped.item<float>() == 0.0f) {
      state_.consecutive_nonfinite = 0;
    } else if (++state_.consecutive_nonfinite > mp.max_consecutive_nonfinite_steps()) {
      return NonFiniteStreakError();
    }
  } else {
    // Decided on the device (on the CPU too, where FUSED SGD takes this path): the streak is
    // counted there and read at logging steps, every max_consecutive_nonfinite_steps steps and
    // before a checkpoint is written, so a run stops at most that many steps late.
    if (!nonfinite_streak_.defined()) {
      const auto on_device = at::TensorOptions().dtype(at::kLong).device(result.skipped.device());
      nonfinite_streak_ = at::full({}, state_.consecutive_nonfinite, on_device);
    }
    const at::Tensor skipped = result.skipped.to(at::kLong);
    nonfinite_streak_ = (nonfinite_streak_ + skipped) * skipped;
    if (want_values || (state_.step + 1) % mp.max_consecutive_nonfinite_steps() == 0) {
      VISION_RETURN_IF_ERROR(CheckNonFiniteStreak());
    }
  }
  if (want_values && result.grad_norm.defined()) {
    values->grad_norm = values->OptimizerStepped() ? result.grad_norm.item<double>() : 0.0;
  }
  p_.optimizer->torch_optimizer().zero_grad();
  if (want_values) values->loss = total_for_log.item<double>();
  values->skipped_samples = train_loader_->skipped_samples();
  return absl::OkStatus();
}

absl::Status Trainer::Loop::NonFiniteStreakError() const {
  return absl::AbortedError(absl::StrFormat(
      "%d consecutive steps had non-finite gradients (last at step %d); stopping. The last "
      "good checkpoint in %s is kept. Lower optimizer.lr, enable train.clip_grad_norm, or "
      "check the data.",
      state_.consecutive_nonfinite, state_.step, checkpoints_.dir()));
}

absl::Status Trainer::Loop::CheckNonFiniteStreak() {
  if (!nonfinite_streak_.defined()) return absl::OkStatus();
  state_.consecutive_nonfinite = nonfinite_streak_.item<int64_t>();
  if (state_.consecutive_nonfinite > config_.mixed_precision().max_consecutive_nonfinite_steps()) {
    return NonFiniteStreakError();
  }
  return absl::OkStatus();
}

// Logged losses are the mean over ranks, not this rank's share of the batch; skipped bad
// samples are the sum.
absl::Status Trainer::Loop::AverageOverRanks(core::StepValues* values) {
  if (!values->has_values || collectives_.world_size() == 1) return absl::OkStatus();
  std::vector<double> flat = {values->loss};
  for (const auto& [name, value] : values->loss_terms) flat.push_back(value);
  flat.push_back(static_cast<double>(values->skipped_samples));
  std::vector<at::Tensor> summed = {at::tensor(flat, at::kDouble)};
  VISION_RETURN_IF_ERROR(collectives_.AllReduceSum(summed));
  const at::Tensor mean = summed[0] / collectives_.world_size();
  values->loss = mean[0].item<double>();
  int64_t i = 1;
  for (auto& [name, value] : values->loss_terms) value = mean[i++].item<double>();
  values->skipped_samples = static_cast<int64_t>(summed[0][i].item<double>());
  return absl::OkStatus();
}

absl::Status Trainer::Loop::SaveCheckpoint(bool is_best) {
  // A streak of skipped steps counted on the device ends the run before it is saved.
  VISION_RETURN_IF_ERROR(CheckNonFiniteStreak());
  absl::Status status;
  if (is_main()) {
    state_.loss_scaler_state = scaler_.State();
    state_.config_text = core::ConfigToText(config_);
    state_.config_fingerprint = core::ConfigFingerprint(config_);
    state_.hook_states.clear();
    for (const auto& hook : p_.hooks) state_.hook_states.push_back(hook->SaveState());
    status = checkpoints_.Save(
        TrainingState{p_.model.get(), &p_.optimizer->torch_optimizer(), ema_.get()}, state_, is_best);
  }
  // Nobody runs ahead of a checkpoint that may still be written (a restart would miss it).
  VISION_RETURN_IF_ERROR(collectives_.Barrier());
  return status;
}

absl::Status Trainer::Loop::LogScalars(const std::map<std::string, double>& values) {
  if (!is_main()) return absl::OkStatus();
  if (metrics_log_) {
    logging::MetricsRecord record;
    record.step = state_.step;
    record.epoch = state_.epoch;
    record.values = values;
    VISION_RETURN_IF_ERROR(metrics_log_->Append(record));
  }
  if (tensorboard_) {
    for (const auto& [name, value] : values) {
      VISION_RETURN_IF_ERROR(tensorboard_->AddScalar(name, static_cast<float>(value), state_.step));
    }
    VISION_RETURN_IF_ERROR(tensorboard_->Flush());
  }
  return absl::OkStatus();
}

// The spine: steps, and the hooks around them (core/hook.h lists the points).
absl::StatusOr<TrainResult> Trainer::Loop::Run() {
  const Clock::time_point start = Clock::now();
  VISION_RETURN_IF_ERROR(StartEpoch(state_.epoch, state_.batch_in_epoch));
  first_step_ = state_.step;
  if (!config_.name().empty()) Print(absl::StrCat("run: ", config_.name()));
  // The datasets' summaries carry what they repaired or dropped while listing (README, "Data
  // policies"), so it is stated where the run starts.
  Print(absl::StrCat("train_data: ", p_.train_dataset->Describe()));
  if (p_.eval_dataset != nullptr) Print(absl::StrCat("eval_data: ", p_.eval_dataset->Describe()));
  Print(absl::StrFormat("training %d steps (%d batches of %d per rank and epoch, %d ranks, global batch %d)",
                        total_steps_, batches_per_epoch_, config_.train_data().loader().batch_size(),
                        collectives_.world_size(), p_.global_batch_size));
  Print(core::DescribeEffectiveRecipe(config_, p_, collectives_.world_size(), total_steps_));
  VISION_RETURN_IF_ERROR(CallHooks([&](core::Hook& h) { return h.BeforeTrain(*this); }));
  while (state_.step < total_steps_ && !stop_requested()) {
    VISION_RETURN_IF_ERROR(CallHooks([&](core::Hook& h) { return h.BeforeStep(*this); }));
    core::StepValues values;
    for (const core::Hook* hook : hooks_) values.has_values |= hook->WantsStepValues(*this);
    const Clock::time_point step_start = Clock::now();
    const int64_t step_us = core::trace::Enabled() ? core::trace::NowUs() : 0;
    VISION_RETURN_IF_ERROR(core::GuardTorch(absl::StrCat("training step ", state_.step + 1),
                                            [&] { return TrainStep(&values); }));
    if (core::trace::Enabled()) {
      core::trace::Record("step", "step", step_us, core::trace::NowUs(),
                          core::trace::NamedLane("steps"), {{"step", state_.step + 1.0}});
    }
    VISION_RETURN_IF_ERROR(AverageOverRanks(&values));
    ++state_.step;
    values.seconds = Seconds(step_start);
    VISION_RETURN_IF_ERROR(CallHooks([&](core::Hook& h) { return h.AfterStep(*this, values); }));
  }
  if (stop_requested()) Print(absl::StrCat("stopped at step ", state_.step, ": ", stop_reason_));
  VISION_RETURN_IF_ERROR(CallHooks([&](core::Hook& h) { return h.AfterTrain(*this); }));
  return Summarize(Seconds(start));
}

// The run's result and its closing summary (over every rank).
absl::StatusOr<TrainResult> Trainer::Loop::Summarize(double seconds) {
  TrainResult result;
  result.steps = state_.step;
  result.resumed_from = resumed_from_;
  result.final_metrics = evaluation_.metrics;
  result.images_per_second =
      (state_.step - first_step_) * p_.global_batch_size / std::max(seconds, 1e-9);
  logging::TrainingSummary summary;
  summary.skipped_samples = train_loader_->skipped_samples();
  if (collectives_.world_size() > 1) {
    std::vector<at::Tensor> skipped = {at::full({1}, summary.skipped_samples, at::kLong)};
    VISION_RETURN_IF_ERROR(collectives_.AllReduceSum(skipped));
    summary.skipped_samples = skipped[0].item<int64_t>();
  }
  summary.steps = state_.step - first_step_;
  summary.total_seconds = seconds;
  summary.images_per_second = result.images_per_second;
  if (absl::StatusOr<double> peak = logging::PeakResidentMemoryMiB(); peak.ok()) {
    summary.peak_memory_mib = *peak;
  }
  summary.peak_device_memory_mib = PeakDeviceMemoryMiB(device_);
  if (p_.evaluator != nullptr && state_.has_best_metric) {
    summary.best_metric_name = p_.evaluator->MainMetric();
    summary.best_metric_value = state_.best_metric;
    summary.best_metric_step = state_.best_metric_step;
  }
  Print(logging::FormatTrainingSummary(summary));
  return result;
}

absl::StatusOr<std::map<std::string, double>> Trainer::Loop::Evaluate() {
  if (p_.evaluator == nullptr || p_.eval_dataset == nullptr) {
    return absl::FailedPreconditionError("evaluation needs evaluation.evaluator and eval_data");
  }
  EvaluationJob job =
      EvaluationJobFromConfig(config_, p_.model.get(), p_.eval_dataset.get(),
                              p_.eval_augmentations, p_.evaluator.get(), device_, &collectives_);
  // A few of rank 0's predictions drawn over their ground truth, for TensorBoard.
  constexpr int kImages = 4;
  std::vector<cv::Mat> drawn;
  if (tensorboard_ != nullptr) {
    job.on_prediction = [&](const core::Sample& prediction, const core::Sample& truth) {
      if (drawn.size() >= kImages || !draw_predictions_) return absl::OkStatus();
      absl::StatusOr<cv::Mat> image = DrawPrediction(prediction, truth);
      if (!image.ok()) {
        // Images that do not come from files cannot be drawn; training is not affected.
        std::fprintf(stderr, "warning: no prediction images in TensorBoard: %s\n",
                     std::string(image.status().message()).c_str());
        draw_predictions_ = false;
        return absl::OkStatus();
      }
      drawn.push_back(std::move(image).value());
      return absl::OkStatus();
    };
  }
  VISION_RETURN_IF_ERROR(CallHooks([&](core::Hook& h) { return h.BeforeEvaluation(*this); }));
  absl::StatusOr<std::map<std::string, double>> metrics = RunEvaluation(job);
  if (metrics.ok()) {
    std::vector<std::string> parts;
    for (const auto& [name, value] : *metrics) parts.push_back(absl::StrFormat("%s %.4f", name, value));
    Print(absl::StrCat("eval at step ", state_.step, ": ", absl::StrJoin(parts, "  ")));
  }
  // Every hook may undo what it did before the evaluation, also when the evaluation failed.
  const std::map<std::string, double>* seen = metrics.ok() ? &*metrics : nullptr;
  const absl::Status after =
      CallHooks([&](core::Hook& h) { return h.AfterEvaluation(*this, seen); });
  if (!metrics.ok()) return metrics.status();
  VISION_RETURN_IF_ERROR(after);
  for (size_t i = 0; i < drawn.size(); ++i) {
    VISION_RETURN_IF_ERROR(
        tensorboard_->AddImage(absl::StrCat("eval/prediction_", i), drawn[i], state_.step));
  }
  return metrics;
}

Trainer::Trainer(const core::TrainPipelineConfig& config, core::Collectives* collectives,
                 TrainerOptions options, core::Pipeline pipeline)
    : pipeline_(std::move(pipeline)),
      loop_(std::make_unique<Loop>(config, collectives, options, pipeline_)) {}

Trainer::~Trainer() = default;

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const core::TrainPipelineConfig& config,
                                                         core::Collectives* collectives,
                                                         TrainerOptions options) {
  // The config's seed decides the model's initial weights (every rank builds the same ones,
  // whatever joining the process group did to the global generator).
  torch::manual_seed(config.seed());
  VISION_ASSIGN_OR_RETURN(core::Pipeline pipeline,
                          core::BuildPipeline(config, collectives->world_size()));
  std::unique_ptr<Trainer> trainer(new Trainer(config, collectives, options, std::move(pipeline)));
  VISION_RETURN_IF_ERROR(core::GuardTorch("initialising training", [&] { return trainer->loop_->Init(); }));
  return trainer;
}

absl::StatusOr<TrainResult> Trainer::Run() { return loop_->Run(); }

absl::StatusOr<std::map<std::string, double>> Trainer::Evaluate() { return loop_->Evaluate(); }

}  // namespace vision::engine
