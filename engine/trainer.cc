#include "engine/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/nn/utils/clip_grad.h>

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
#include "engine/loss_scaler.h"
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

class Trainer::Loop {
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
  absl::StatusOr<std::map<std::string, double>> Evaluate();

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
  void Print(const std::string& line) const {
    if (is_main() && options_.verbose) std::printf("%s\n", line.c_str()), std::fflush(stdout);
  }
  absl::Status SetUpProcess();
  absl::Status CheckRanksRunOneConfig();
  absl::Status SetUpModel();
  absl::Status SetUpData();
  absl::Status OpenLogs();
  absl::Status Resume();
  absl::Status SetUpReplicas();
  absl::Status StartEpoch(int64_t epoch, int64_t first_batch);
  absl::StatusOr<core::Batch> NextTrainBatch();
  absl::Status TrainStep(std::map<std::string, double>* log_terms, double* loss_value,
                         double* grad_norm, bool want_log);
  absl::Status SaveCheckpoint(bool is_best);
  absl::Status LogScalars(int64_t step, const std::map<std::string, double>& values);

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
  std::unique_ptr<ModelEma> ema_;
  CheckpointManager checkpoints_;
  CheckpointMeta state_;
  int64_t batches_per_epoch_ = 0;
  int64_t total_steps_ = 0;
  int64_t resumed_from_ = -1;
  std::unique_ptr<logging::MetricsLog> metrics_log_;
  std::unique_ptr<logging::TensorBoardWriter> tensorboard_;
  bool draw_predictions_ = true;
};

absl::Status Trainer::Loop::Init() {
  VISION_RETURN_IF_ERROR(SetUpProcess());
  VISION_RETURN_IF_ERROR(CheckRanksRunOneConfig());
  VISION_RETURN_IF_ERROR(SetUpModel());
  VISION_RETURN_IF_ERROR(SetUpData());
  VISION_RETURN_IF_ERROR(OpenLogs());
  VISION_RETURN_IF_ERROR(Resume());
  return SetUpReplicas();
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
  ConfigureDevice(device_, config_.cudnn_benchmark());
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
  batches_per_epoch_ = lc.drop_last() ? per_rank / lc.batch_size()
                                      : (per_rank + lc.batch_size() - 1) / lc.batch_size();
  const int accumulation = t.gradient_accumulation_steps();
  if (batches_per_epoch_ < accumulation) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "train_data: %d samples give %d batches of %d per rank and epoch over %d ranks, fewer "
        "than train.gradient_accumulation_steps (%d): use a smaller batch_size or more data",
        p_.train_dataset->Size(), batches_per_epoch_, lc.batch_size(), collectives_.world_size(),
        accumulation));
  }
  total_steps_ = t.has_max_steps() ? t.max_steps() : t.max_epochs() * (batches_per_epoch_ / accumulation);
  train_loader_ = std::make_unique<data::DataLoader>(
      *p_.train_dataset, Pointers(p_.train_augmentations), p_.model->MakeTargetGenerator(),
      LoaderOptionsFromConfig(lc, config_.seed(), !device_.is_cpu()));
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
      return std::move(*batch);
    }
    VISION_RETURN_IF_ERROR(StartEpoch(state_.epoch + 1, 0));
  }
}

absl::Status Trainer::Loop::TrainStep(std::map<std::string, double>* log_terms,
                                      double* loss_value, double* grad_norm, bool want_log) {
  const core::TrainLoopConfig& t = config_.train();
  const int accumulation = t.gradient_accumulation_steps();
  const core::MixedPrecisionConfig& mp = config_.mixed_precision();
  const at::ScalarType dtype =
      mp.dtype() == core::MixedPrecisionConfig::FLOAT16 ? at::kHalf : at::kBFloat16;
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
        if (want_log) (*log_terms)[name] += term.item<double>() / accumulation;
      }
    }
    total = total / accumulation;
    if (want_log) total_for_log += total.detach().to(at::kCPU, at::kDouble);
    core::trace::ScopedSpan span("backward", "step");
    scaler_.Scale(total).backward();
  }
  if (p_.comm_strategy != nullptr && collectives_.world_size() > 1) {
    core::trace::ScopedSpan span("finish_backward", "step");
    VISION_RETURN_IF_ERROR(p_.comm_strategy->FinishBackward());
  }
  core::trace::ScopedSpan optimizer_span("optimizer", "step");
  // Gradients are identical on every rank now, so every rank takes the same decision.
  const bool finite = scaler_.UnscaleAndCheckFinite(params_);
  scaler_.Update(finite);
  if (finite) {
    state_.consecutive_nonfinite = 0;
    if (t.clip_grad_norm() > 0) {
      *grad_norm = torch::nn::utils::clip_grad_norm_(params_, t.clip_grad_norm());
    } else if (want_log) {
      double sum = 0;
      for (const at::Tensor& p : params_) {
        if (p.grad().defined()) sum += p.grad().to(at::kDouble).pow(2).sum().item<double>();
      }
      *grad_norm = std::sqrt(sum);
    }
    p_.optimizer->SetLrFactor(p_.lr_schedule->Factor(state_.step, total_steps_));
    p_.optimizer->torch_optimizer().step();
    if (ema_) ema_->Update(*p_.model);
  } else if (++state_.consecutive_nonfinite > mp.max_consecutive_nonfinite_steps()) {
    return absl::AbortedError(absl::StrFormat(
        "%d consecutive steps had non-finite gradients (last at step %d); stopping. The last "
        "good checkpoint in %s is kept. Lower optimizer.lr, enable train.clip_grad_norm, or "
        "check the data.",
        state_.consecutive_nonfinite, state_.step, checkpoints_.dir()));
  }
  p_.optimizer->torch_optimizer().zero_grad();
  if (want_log) *loss_value = total_for_log.item<double>();
  return absl::OkStatus();
}

absl::Status Trainer::Loop::SaveCheckpoint(bool is_best) {
  absl::Status status;
  if (is_main()) {
    state_.loss_scaler_state = scaler_.State();
    state_.config_text = core::ConfigToText(config_);
    state_.config_fingerprint = core::ConfigFingerprint(config_);
    status = checkpoints_.Save(
        TrainingState{p_.model.get(), &p_.optimizer->torch_optimizer(), ema_.get()}, state_, is_best);
  }
  // Nobody runs ahead of a checkpoint that may still be written (a restart would miss it).
  VISION_RETURN_IF_ERROR(collectives_.Barrier());
  return status;
}

absl::Status Trainer::Loop::LogScalars(int64_t step, const std::map<std::string, double>& values) {
  if (!is_main()) return absl::OkStatus();
  if (metrics_log_) {
    logging::MetricsRecord record;
    record.step = step;
    record.epoch = state_.epoch;
    record.values = values;
    VISION_RETURN_IF_ERROR(metrics_log_->Append(record));
  }
  if (tensorboard_) {
    for (const auto& [name, value] : values) {
      VISION_RETURN_IF_ERROR(tensorboard_->AddScalar(name, static_cast<float>(value), step));
    }
    VISION_RETURN_IF_ERROR(tensorboard_->Flush());
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainResult> Trainer::Loop::Run() {
  const Clock::time_point start = Clock::now();
  VISION_RETURN_IF_ERROR(StartEpoch(state_.epoch, state_.batch_in_epoch));
  const int64_t log_every = config_.logging().every_n_steps();
  const int64_t eval_every = config_.evaluation().every_n_steps();
  const int64_t ckpt_every = config_.checkpoint().every_n_steps();
  const int64_t images_per_step = p_.global_batch_size;
  const int64_t first_step = state_.step;
  logging::StepTimeEstimator estimator;
  Clock::time_point window_start = Clock::now();
  double window_wait = train_loader_->wait_seconds();
  int64_t window_steps = 0;
  std::map<std::string, double> final_metrics;
  if (!config_.name().empty()) Print(absl::StrCat("run: ", config_.name()));
  // The datasets' summaries carry what they repaired or dropped while listing (README, "Data
  // policies"), so it is stated where the run starts.
  Print(absl::StrCat("train_data: ", p_.train_dataset->Describe()));
  if (p_.eval_dataset != nullptr) Print(absl::StrCat("eval_data: ", p_.eval_dataset->Describe()));
  Print(absl::StrFormat("training %d steps (%d batches of %d per rank and epoch, %d ranks, global batch %d)",
                        total_steps_, batches_per_epoch_, config_.train_data().loader().batch_size(),
                        collectives_.world_size(), images_per_step));

  const core::TraceConfig& trace_config = config_.logging().trace();
  if (trace_config.num_steps() < 0 || trace_config.start_step() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "logging.trace: start_step (", trace_config.start_step(), ") and num_steps (",
        trace_config.num_steps(), ") must be >= 0; num_steps: 0 turns tracing off"));
  }
  std::string trace_file;
  if (trace_config.num_steps() > 0) {
    std::string dir =
        trace_config.path().empty() ? config_.checkpoint().output_dir() : trace_config.path();
    if (dir.empty()) dir = ".";
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    if (error) {
      return absl::InvalidArgumentError(absl::StrCat("logging.trace.path: cannot create '", dir,
                                                     "': ", error.message()));
    }
    trace_file = absl::StrCat(dir, "/trace_rank", collectives_.rank(), ".json");
  }
  // Ends the trace window: every rank writes its own file.
  const auto finish_trace = [&]() -> absl::Status {
    if (!core::trace::Enabled()) return absl::OkStatus();
    core::trace::Stop();
    VISION_RETURN_IF_ERROR(core::trace::WriteChromeTrace(trace_file));
    Print(absl::StrCat("trace of ", trace_config.num_steps(), " step(s) written to ", trace_file,
                       " (every rank writes its own trace_rank<k>.json)"));
    return absl::OkStatus();
  };

  while (state_.step < total_steps_) {
    if (!trace_file.empty() && state_.step - first_step == trace_config.start_step()) {
      core::trace::Start(collectives_.rank());
      core::trace::NameThisThread("trainer");
    }
    const bool want_log = (state_.step + 1) % log_every == 0 || state_.step + 1 == total_steps_;
    std::map<std::string, double> terms;
    double loss = 0, grad_norm = 0;
    const Clock::time_point step_start = Clock::now();
    const int64_t step_us = core::trace::Enabled() ? core::trace::NowUs() : 0;
    VISION_RETURN_IF_ERROR(core::GuardTorch(absl::StrCat("training step ", state_.step + 1), [&] {
      return TrainStep(&terms, &loss, &grad_norm, want_log);
    }));
    if (core::trace::Enabled()) {
      core::trace::Record("step", "step", step_us, core::trace::NowUs(),
                          core::trace::NamedLane("steps"), {{"step", state_.step + 1.0}});
    }
    int64_t skipped = train_loader_->skipped_samples();
    if (want_log && collectives_.world_size() > 1) {
      // Logged losses are the mean over ranks, not rank 0's share of the batch; skipped bad
      // samples are the sum.
      std::vector<double> values = {loss};
      for (const auto& [name, value] : terms) values.push_back(value);
      values.push_back(static_cast<double>(skipped));
      std::vector<at::Tensor> summed = {at::tensor(values, at::kDouble)};
      VISION_RETURN_IF_ERROR(collectives_.AllReduceSum(summed));
      const at::Tensor mean = summed[0] / collectives_.world_size();
      loss = mean[0].item<double>();
      int64_t i = 1;
      for (auto& [name, value] : terms) value = mean[i++].item<double>();
      skipped = static_cast<int64_t>(summed[0][i].item<double>());
    }
    ++state_.step;
    if (state_.step - first_step == trace_config.start_step() + trace_config.num_steps()) {
      VISION_RETURN_IF_ERROR(finish_trace());
    }
    ++window_steps;
    estimator.AddStep(Seconds(step_start));
    if (want_log) {
      const double window_seconds = Seconds(window_start);
      const double lr = p_.optimizer->lr(0);
      logging::ProgressLine line;
      line.step = state_.step;
      line.total_steps = total_steps_;
      line.loss = loss;
      for (const auto& [name, value] : terms) line.loss_terms.emplace_back(name, value);
      line.lr = lr;
      line.images_per_second = window_steps * images_per_step / std::max(window_seconds, 1e-9);
      line.data_wait_fraction =
          std::clamp((train_loader_->wait_seconds() - window_wait) / std::max(window_seconds, 1e-9), 0.0, 1.0);
      line.elapsed_seconds = Seconds(start);
      line.eta_seconds = estimator.EtaSeconds(total_steps_ - state_.step);
      line.skipped_samples = skipped;
      Print(logging::FormatProgressLine(line));
      std::map<std::string, double> scalars = terms;
      scalars["loss"] = loss;
      scalars["lr"] = lr;
      scalars["grad_norm"] = grad_norm;
      scalars["images_per_second"] = line.images_per_second;
      scalars["data_wait_fraction"] = line.data_wait_fraction;
      if (scaler_.enabled()) scalars["loss_scale"] = scaler_.scale();
      scalars["skipped_steps"] = static_cast<double>(scaler_.skipped_steps());
      VISION_RETURN_IF_ERROR(LogScalars(state_.step, scalars));
      window_start = Clock::now();
      window_wait = train_loader_->wait_seconds();
      window_steps = 0;
    }
    const bool last = state_.step == total_steps_;
    bool is_best = false;
    if (p_.evaluator != nullptr && ((eval_every > 0 && state_.step % eval_every == 0) || last)) {
      VISION_ASSIGN_OR_RETURN(final_metrics, Evaluate());
      auto main_metric = final_metrics.find(p_.evaluator->MainMetric());
      if (main_metric == final_metrics.end()) {
        return absl::InternalError(absl::StrCat("the evaluator computed no '",
                                                p_.evaluator->MainMetric(), "' metric"));
      }
      const double value = main_metric->second;
      is_best = !state_.has_best_metric || value > state_.best_metric;
      if (is_best) {
        state_.has_best_metric = true;
        state_.best_metric = value;
        state_.best_metric_step = state_.step;
      }
      std::map<std::string, double> scalars;
      for (const auto& [name, v] : final_metrics) scalars["eval/" + name] = v;
      VISION_RETURN_IF_ERROR(LogScalars(state_.step, scalars));
    }
    if (last || (ckpt_every > 0 && state_.step % ckpt_every == 0)) {
      VISION_RETURN_IF_ERROR(SaveCheckpoint(is_best));
    }
  }
  // Training ended inside the trace window.
  VISION_RETURN_IF_ERROR(finish_trace());
  TrainResult result;
  result.steps = state_.step;
  result.resumed_from = resumed_from_;
  result.final_metrics = final_metrics;
  const double seconds = Seconds(start);
  result.images_per_second = (state_.step - first_step) * images_per_step / std::max(seconds, 1e-9);
  logging::TrainingSummary summary;
  summary.skipped_samples = train_loader_->skipped_samples();
  if (collectives_.world_size() > 1) {
    std::vector<at::Tensor> skipped = {at::full({1}, summary.skipped_samples, at::kLong)};
    VISION_RETURN_IF_ERROR(collectives_.AllReduceSum(skipped));
    summary.skipped_samples = skipped[0].item<int64_t>();
  }
  summary.steps = state_.step - first_step;
  summary.total_seconds = seconds;
  summary.images_per_second = result.images_per_second;
  if (absl::StatusOr<double> peak = logging::PeakResidentMemoryMiB(); peak.ok()) {
    summary.peak_memory_mib = *peak;
  }
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
  if (ema_) ema_->Swap(*p_.model);
  absl::StatusOr<std::map<std::string, double>> metrics = RunEvaluation(job);
  if (ema_) ema_->Swap(*p_.model);
  if (!metrics.ok()) return metrics.status();
  for (size_t i = 0; i < drawn.size(); ++i) {
    VISION_RETURN_IF_ERROR(
        tensorboard_->AddImage(absl::StrCat("eval/prediction_", i), drawn[i], state_.step));
  }
  std::vector<std::string> parts;
  for (const auto& [name, value] : *metrics) parts.push_back(absl::StrFormat("%s %.4f", name, value));
  Print(absl::StrCat("eval at step ", state_.step, ": ", absl::StrJoin(parts, "  ")));
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
