#include "engine/trainer.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/hook.h"
#include "engine/testing/test_plugins.pb.h"
#include "core/config/loader.h"
#include "core/collectives.h"
#include "core/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::engine {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string TempDir(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  fs::path dir = fs::path(root ? root : "/tmp") / name;
  fs::remove_all(dir);
  return dir.string();
}

core::TrainPipelineConfig Config(const std::string& dir, const std::string& extra = "") {
  core::TrainPipelineConfig config;
  const std::string text = absl::StrCat(R"pb(
    model { type: "TestRegressor" }
    train_data {
      dataset { type: "TestImages" }
      loader { batch_size: 4 num_workers: 2 }
    }
    eval_data {
      dataset { type: "TestImages" }
      loader { batch_size: 5 num_workers: 1 }
    }
    evaluation { evaluator { type: "TestShareError" } every_n_steps: 4 }
    optimizer { type: "SGD" lr: 0.05 }
    lr_schedule { type: "Cosine" warmup_steps: 2 }
    train { max_steps: 8 clip_grad_norm: 10 intra_op_threads: 1 }
    logging { every_n_steps: 2 }
    seed: 3
    checkpoint { every_n_steps: 4 keep_last: 5 output_dir: ")pb", dir, "\" }\n");
  EXPECT_TRUE(core::MergeConfigText(text, "test", &config).ok());
  EXPECT_TRUE(core::MergeConfigText(extra, "extra", &config).ok());
  EXPECT_TRUE(core::ValidatePipelineConfig(config).ok()) << core::ValidatePipelineConfig(config);
  return config;
}

absl::StatusOr<TrainResult> Train(const core::TrainPipelineConfig& config,
                                  std::vector<at::Tensor>* params = nullptr,
                                  bool allow_mismatch = false) {
  core::SingleProcess single;
  TrainerOptions options;
  options.verbose = false;
  options.allow_config_mismatch = allow_mismatch;
  VISION_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer,
                          Trainer::Create(config, &single, options));
  auto result = trainer->Run();
  if (params != nullptr) {
    params->clear();
    for (const at::Tensor& p : trainer->model().parameters()) params->push_back(p.detach().clone());
  }
  return result;
}

void ExpectBitwiseEqual(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i], b[i])) << "parameter " << i;
}

TEST(TrainerTest, TrainsEvaluatesCheckpointsAndLogs) {
  const std::string dir = TempDir("basic");
  auto result = Train(Config(dir, "train { max_steps: 24 }"));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->steps, 24);
  EXPECT_EQ(result->resumed_from, -1);
  EXPECT_EQ(result->final_metrics.at("count"), 24);  // every eval sample exactly once
  EXPECT_LT(result->final_metrics.at("mae"), 0.1);   // the regressor learned the bright share
  EXPECT_TRUE(fs::exists(dir + "/checkpoint_24.pt"));
  EXPECT_TRUE(fs::exists(dir + "/best.pt"));
  EXPECT_TRUE(fs::exists(dir + "/metrics.jsonl"));
  EXPECT_FALSE(fs::is_empty(dir + "/tensorboard"));
}

TEST(TrainerTest, ResumedRunEqualsUninterruptedRunBitwise) {
  std::vector<at::Tensor> straight, resumed;
  const std::string a = TempDir("straight"), b = TempDir("resumed");
  ASSERT_TRUE(Train(Config(a), &straight).ok());
  // As if the run had been killed right after step 4: only that checkpoint exists.
  fs::create_directories(b);
  fs::copy_file(a + "/checkpoint_4.pt", b + "/checkpoint_4.pt");
  auto result = Train(Config(b), &resumed);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->resumed_from, 4);
  EXPECT_EQ(result->steps, 8);
  ExpectBitwiseEqual(straight, resumed);
}

TEST(TrainerTest, ResumeWithLossScalingAndAccumulationIsExact) {
  const std::string extra =
      "mixed_precision { loss_scaling: true init_scale: 1024 growth_interval: 3 }"
      " train { gradient_accumulation_steps: 2 }"
      " train_data { loader { batch_size: 2 } }";
  std::vector<at::Tensor> straight, resumed;
  const std::string a = TempDir("scaled_straight"), b = TempDir("scaled_resumed");
  ASSERT_TRUE(Train(Config(a, extra), &straight).ok());
  fs::create_directories(b);
  fs::copy_file(a + "/checkpoint_4.pt", b + "/checkpoint_4.pt");
  ASSERT_TRUE(Train(Config(b, extra), &resumed).ok());
  ExpectBitwiseEqual(straight, resumed);
}

// TrainPipelineConfig.memory_format: the same training up to float reordering, the weights kept
// in channels-last layout through the optimizer and a checkpoint, and resume still exact.
TEST(TrainerTest, ChannelsLastTrainsAsContiguousAndResumesExactly) {
  const std::string channels_last = "memory_format: CHANNELS_LAST";
  std::vector<at::Tensor> contiguous, resumed;
  const std::string a = TempDir("nchw"), b = TempDir("nhwc"), c = TempDir("nhwc_resumed");
  ASSERT_TRUE(Train(Config(a), &contiguous).ok());
  core::SingleProcess single;
  TrainerOptions options;
  options.verbose = false;
  auto trainer = Trainer::Create(Config(b, channels_last), &single, options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  auto result = (*trainer)->Run();
  ASSERT_TRUE(result.ok()) << result.status();
  int four_d = 0;
  for (const auto& p : (*trainer)->model().named_parameters()) {
    if (p.value().dim() != 4) continue;
    ++four_d;
    EXPECT_TRUE(p.value().is_contiguous(at::MemoryFormat::ChannelsLast)) << p.key();
  }
  EXPECT_EQ(four_d, 2);  // TestRegressor's conv1 and conv2 weights
  std::vector<at::Tensor> straight;
  for (const at::Tensor& p : (*trainer)->model().parameters()) straight.push_back(p.detach().clone());
  ASSERT_EQ(straight.size(), contiguous.size());
  for (size_t i = 0; i < contiguous.size(); ++i) {
    const double difference = (straight[i] - contiguous[i]).abs().max().item<double>();
    const double scale = contiguous[i].abs().max().item<double>();
    EXPECT_LE(difference, 1e-5 * scale + 1e-7)
        << "parameter " << i << ": channels-last differs from contiguous by " << difference
        << " (largest |value| " << scale << "); float reordering gives ~1e-7 relative";
  }
  fs::create_directories(c);
  fs::copy_file(b + "/checkpoint_4.pt", c + "/checkpoint_4.pt");
  ASSERT_TRUE(Train(Config(c, channels_last), &resumed).ok());
  ExpectBitwiseEqual(straight, resumed);
}

TEST(TrainerTest, TruncatedLatestCheckpointFallsBackAndStillMatches) {
  std::vector<at::Tensor> straight, recovered;
  const std::string a = TempDir("crash_a"), b = TempDir("crash_b");
  ASSERT_TRUE(Train(Config(a), &straight).ok());
  fs::create_directories(b);
  fs::copy_file(a + "/checkpoint_4.pt", b + "/checkpoint_4.pt");
  fs::copy_file(a + "/checkpoint_8.pt", b + "/checkpoint_8.pt");
  fs::resize_file(b + "/checkpoint_8.pt", fs::file_size(b + "/checkpoint_8.pt") / 3);
  auto result = Train(Config(b), &recovered);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->resumed_from, 4);
  ExpectBitwiseEqual(straight, recovered);
}

TEST(TrainerTest, ConfigMismatchOnResumeIsRefusedUnlessAllowed) {
  const std::string dir = TempDir("mismatch");
  ASSERT_TRUE(Train(Config(dir)).ok());
  auto refused = Train(Config(dir, "optimizer { lr: 0.07 }"));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("optimizer.lr"));
  EXPECT_THAT(refused.status().message(), HasSubstr("--allow_config_mismatch"));
  auto allowed = Train(Config(dir, "optimizer { lr: 0.07 }"), nullptr, /*allow_mismatch=*/true);
  ASSERT_TRUE(allowed.ok()) << allowed.status();
  EXPECT_EQ(allowed->resumed_from, 8);
}

// Non-finite gradients at every step stop the run with a clear error before the checkpoint of
// step 4. Decided on the host (FOR_LOOP): after the limit exactly. SGD stepped by FUSED (the
// default on CUDA) checks, skips and counts them on the device and reads the streak only at
// logging steps (here every 2) and checkpoints: the same error, at most that many steps later.
TEST(TrainerTest, PersistentNonFiniteGradientsStopWithAClearError) {
  for (const std::string implementation : {"FOR_LOOP", "FUSED"}) {
    const std::string dir = TempDir("nonfinite_" + implementation);
    auto result = Train(Config(
        dir, absl::StrCat("model { options { [type.googleapis.com/vision.engine.testing."
                          "TestRegressorOptions] { loss_multiplier: 1e38 } } }"
                          " mixed_precision { max_consecutive_nonfinite_steps: 2 }"
                          " optimizer { implementation: ",
                          implementation, " } train { clip_grad_norm: 0 }")));
    EXPECT_EQ(result.status().code(), absl::StatusCode::kAborted) << implementation;
    EXPECT_THAT(result.status().message(),
                HasSubstr(implementation == "FOR_LOOP"
                              ? "3 consecutive steps had non-finite gradients"
                              : "consecutive steps had non-finite gradients"))
        << implementation;
    EXPECT_FALSE(fs::exists(dir + "/checkpoint_4.pt")) << implementation;
  }
}

// The last value of `key` in a run's metrics.jsonl; NaN when it is not there.
double LastLogged(const std::string& dir, const std::string& key) {
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line;
  double last = std::nan("");
  while (std::getline(in, line)) {
    const std::string quoted = "\"" + key + "\":";
    const size_t at = line.find(quoted);
    if (at != std::string::npos) last = std::strtod(line.c_str() + at + quoted.size(), nullptr);
  }
  return last;
}

// The same run with the skip decided on the host (FOR_LOOP) and on the device (FUSED): a loss
// scale so large that the first step overflows and is skipped, growth after 3 finite steps,
// clipping, and EMA weights (which the evaluation uses): the same weights and metrics up to
// FUSED's float rounding, the same logged skip count and scale. Resuming the FUSED run from
// step 4 (its loss scale and skip count checkpointed from the device) is exact.
TEST(TrainerTest, StepsSkippedOnTheDeviceTrainAsOnTheHost) {
  const std::string extra =
      "mixed_precision { loss_scaling: true init_scale: 3e38 backoff_factor: 1e-6"
      " growth_interval: 3 } train { ema_decay: 0.5 }"
      " model { options { [type.googleapis.com/vision.engine.testing.TestRegressorOptions]"
      " { loss_multiplier: 10 } } }";
  std::vector<at::Tensor> host, device, resumed;
  const std::string a = TempDir("skip_host"), b = TempDir("skip_device"),
                    c = TempDir("skip_device_resumed");
  auto on_host = Train(Config(a, extra + " optimizer { implementation: FOR_LOOP }"), &host);
  ASSERT_TRUE(on_host.ok()) << on_host.status();
  auto on_device = Train(Config(b, extra + " optimizer { implementation: FUSED }"), &device);
  ASSERT_TRUE(on_device.ok()) << on_device.status();
  ASSERT_EQ(host.size(), device.size());
  for (size_t i = 0; i < host.size(); ++i) {
    EXPECT_TRUE(at::allclose(device[i], host[i], 1e-5, 1e-6))
        << "parameter " << i << ": largest difference "
        << (device[i] - host[i]).abs().max().item<double>();
  }
  for (const auto& [name, value] : on_host->final_metrics) {
    EXPECT_NEAR(on_device->final_metrics.at(name), value, 1e-5 * std::abs(value) + 1e-7) << name;
  }
  EXPECT_EQ(LastLogged(a, "skipped_steps"), 1.0);
  EXPECT_EQ(LastLogged(b, "skipped_steps"), 1.0);
  // 3e38 backed off to 3e32 and grown twice; the device keeps it in float32.
  EXPECT_EQ(LastLogged(a, "loss_scale"), 1.2e33);
  EXPECT_NEAR(LastLogged(b, "loss_scale"), 1.2e33, 1.2e33 * 1e-7);
  fs::create_directories(c);
  fs::copy_file(b + "/checkpoint_4.pt", c + "/checkpoint_4.pt");
  auto again = Train(Config(c, extra + " optimizer { implementation: FUSED }"), &resumed);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->resumed_from, 4);
  ExpectBitwiseEqual(device, resumed);
}

TEST(TrainerTest, TrainsUnderBFloat16Autocast) {
  const std::string dir = TempDir("bf16");
  auto result = Train(Config(dir, "train { max_steps: 24 } mixed_precision { enabled: true }"));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_LT(result->final_metrics.at("mae"), 0.15);
}

TEST(TrainerTest, ActivationCheckpointingTheModelCannotDoIsRefused) {
  auto result = Train(Config(TempDir("ckpt"), "train { activation_checkpointing: \"conv1\" }"));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(result.status().message(),
              HasSubstr("train.activation_checkpointing: activation checkpointing is not supported"));
}

TEST(TrainerTest, EmaWeightsAreUsedForEvaluation) {
  auto plain = Train(Config(TempDir("no_ema")));
  auto ema = Train(Config(TempDir("ema"), "train { ema_decay: 0.5 }"));
  ASSERT_TRUE(plain.ok() && ema.ok());
  EXPECT_NE(plain->final_metrics.at("mae"), ema->final_metrics.at("mae"));
}

int CountOf(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(TrainerTest, TraceWindowWritesTheChosenStepsAsAChromeTrace) {
  const std::string dir = TempDir("trace");
  auto result = Train(Config(
      dir, "train { max_steps: 6 } logging { trace { start_step: 2 num_steps: 3 } }"));
  ASSERT_TRUE(result.ok()) << result.status();
  std::ifstream file(dir + "/trace_rank0.json");
  ASSERT_TRUE(file) << "no trace_rank0.json in " << dir;
  std::stringstream buffer;
  buffer << file.rdbuf();
  const std::string text = buffer.str();
  EXPECT_EQ(text.rfind("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", 0), 0u);
  EXPECT_EQ(text.substr(text.size() - 4), "\n]}\n");
  // Steps 3, 4 and 5 (1-based), each with its phases; one process: no gradient communication.
  for (const char* phase : {"step", "data_wait", "forward", "backward", "optimizer"}) {
    EXPECT_EQ(CountOf(text, absl::StrCat("\"name\":\"", phase, "\",")), 3) << phase;
  }
  EXPECT_EQ(CountOf(text, "\"name\":\"finish_backward\""), 0);
  for (int step : {3, 4, 5}) EXPECT_EQ(CountOf(text, absl::StrCat("{\"step\":", step, "}")), 1);
  EXPECT_EQ(CountOf(text, "\"name\":\"rank 0\""), 1);
}

TEST(TrainerTest, NegativeTraceWindowIsRefused) {
  core::TrainPipelineConfig config = Config(TempDir("bad_trace"));
  config.mutable_logging()->mutable_trace()->set_num_steps(-1);
  // By the config's validator (tools/train's path) and by the trainer itself.
  const absl::Status invalid = core::ValidatePipelineConfig(config);
  EXPECT_THAT(std::string(invalid.message()), HasSubstr("logging.trace"));
  auto result = Train(config);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("logging.trace"));
}

// A hook named in the config, registered here as a user's own plugin would be (nothing in
// engine/ knows it): it records every call in order, asks for the loss values of one step
// besides the progress log's, and can stop training.
std::vector<std::string>& HookCalls() {
  static auto* calls = new std::vector<std::string>;
  return *calls;
}

class CallLogHook : public core::Hook {
 public:
  static absl::StatusOr<std::unique_ptr<CallLogHook>> Create(
      const testing::TestHookOptions& options) {
    return std::make_unique<CallLogHook>(options);
  }
  explicit CallLogHook(const testing::TestHookOptions& options) : options_(options) {}
  absl::Status BeforeTrain(core::TrainingRun& run) override {
    return Log(absl::StrCat("before_train ", run.step()));
  }
  bool WantsStepValues(const core::TrainingRun& run) const override {
    return run.step() + 1 == options_.values_at();
  }
  absl::Status BeforeStep(core::TrainingRun& run) override {
    return Log(absl::StrCat("before_step ", run.step()));
  }
  absl::Status AfterStep(core::TrainingRun& run, const core::StepValues& values) override {
    if (values.has_values && !(values.loss > 0)) {
      return absl::InternalError(absl::StrCat("step ", run.step(), ": loss ", values.loss));
    }
    if (run.step() == options_.stop_at()) run.RequestStop("the test hook's stop_at");
    return Log(absl::StrCat("after_step ", run.step(), values.has_values ? " values" : ""));
  }
  absl::Status BeforeEvaluation(core::TrainingRun& run) override {
    return Log(absl::StrCat("before_eval ", run.step()));
  }
  absl::Status AfterEvaluation(core::TrainingRun& run,
                               const std::map<std::string, double>* metrics) override {
    return Log(absl::StrCat("after_eval ", run.step(), metrics != nullptr ? " ok" : " failed"));
  }
  absl::Status AfterTrain(core::TrainingRun& run) override {
    return Log(absl::StrCat("after_train ", run.step()));
  }

 private:
  absl::Status Log(const std::string& call) {
    HookCalls().push_back(call);
    return absl::OkStatus();
  }
  testing::TestHookOptions options_;
};

VISION_REGISTER_PLUGIN(core::HookRegistry, "TestCallLog", CallLogHook, testing::TestHookOptions);

std::string CallLogConfig(int64_t stop_at, int64_t values_at) {
  return absl::StrCat(
      "hooks { type: \"TestCallLog\" options { "
      "[type.googleapis.com/vision.engine.testing.TestHookOptions] { stop_at: ",
      stop_at, " values_at: ", values_at, " } } }");
}

TEST(TrainerTest, HooksAreCalledAtEveryPointInOrder) {
  HookCalls().clear();
  // 8 steps, the progress log every 2 steps, evaluation and checkpoints every 4.
  auto result = Train(Config(TempDir("hook_order"), CallLogConfig(0, 3)));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(absl::StrJoin(HookCalls(), ", "),
            "before_train 0, "
            "before_step 0, after_step 1, before_step 1, after_step 2 values, "
            "before_step 2, after_step 3 values, before_step 3, before_eval 4, after_eval 4 ok, "
            "after_step 4 values, before_step 4, after_step 5, before_step 5, after_step 6 values, "
            "before_step 6, after_step 7, before_step 7, before_eval 8, after_eval 8 ok, "
            "after_step 8 values, after_train 8");
}

TEST(TrainerTest, AHookStopsTrainingWithAFinalCheckpoint) {
  const std::string dir = TempDir("hook_stop");
  auto result = Train(Config(dir, CallLogConfig(5, 0)));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->steps, 5);
  EXPECT_TRUE(fs::exists(dir + "/checkpoint_4.pt"));
  EXPECT_TRUE(fs::exists(dir + "/checkpoint_5.pt"));
  EXPECT_FALSE(fs::exists(dir + "/checkpoint_8.pt"));
}

std::string EarlyStoppingConfig(int patience) {
  // min_delta 10: no evaluation after the first counts as an improvement.
  return absl::StrCat(
      "train { max_steps: 40 } hooks { type: \"EarlyStopping\" options { "
      "[type.googleapis.com/vision.engine.hooks.EarlyStoppingOptions] { patience: ",
      patience, " min_delta: 10 } } }");
}

TEST(TrainerTest, EarlyStoppingEndsTheRunAfterPatienceEvaluations) {
  const std::string dir = TempDir("early_stop");
  // Evaluations every 4 steps: the best at step 4, then 8 and 12 without improvement.
  auto result = Train(Config(dir, EarlyStoppingConfig(2)));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->steps, 12);
  EXPECT_EQ(result->final_metrics.at("count"), 24);
  EXPECT_TRUE(fs::exists(dir + "/checkpoint_12.pt"));
  EXPECT_FALSE(fs::exists(dir + "/checkpoint_16.pt"));
}

// The hook's count is in the checkpoint: resumed from step 8 (one evaluation without
// improvement counted), the run stops at step 12 with the same weights as the uninterrupted
// run, not at step 16 as a hook starting afresh would.
TEST(TrainerTest, EarlyStoppingResumesItsCount) {
  std::vector<at::Tensor> straight, resumed;
  const std::string a = TempDir("early_stop_a"), b = TempDir("early_stop_b");
  ASSERT_TRUE(Train(Config(a, EarlyStoppingConfig(2)), &straight).ok());
  fs::create_directories(b);
  fs::copy_file(a + "/checkpoint_8.pt", b + "/checkpoint_8.pt");
  auto result = Train(Config(b, EarlyStoppingConfig(2)), &resumed);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->resumed_from, 8);
  EXPECT_EQ(result->steps, 12);
  ExpectBitwiseEqual(straight, resumed);
}

// What a run prints when it starts: the recipe as it runs at this world size.
TEST(TrainerTest, TheEffectiveRecipeStatesBatchScaledLrScheduleAndGroups) {
  const core::TrainPipelineConfig config = Config(
      TempDir("recipe"),
      "optimizer { reference_batch_size: 16 weight_decay: 0.0001 }"
      " lr_schedule { type: \"MultiStep\" options {"
      " [type.googleapis.com/vision.engine.schedules.MultiStepOptions] { milestones: [5, 7] } } }");
  absl::StatusOr<core::Pipeline> pipeline = core::BuildPipeline(config, /*world_size=*/2);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  const std::string recipe = core::DescribeEffectiveRecipe(config, *pipeline, 2, 8);
  EXPECT_THAT(recipe, HasSubstr("recipe at 2 processes: global batch 8 = 4 per process x 2 "
                                "processes x 1 accumulation step; lr 0.05 x 8/16 = 0.025 "
                                "(linear scaling rule"));
  // Warmup from 0.001 x 0.025 over steps 1-2; gamma 0.1 after 5 and after 7 steps.
  EXPECT_THAT(recipe, HasSubstr("MultiStep over 8 steps: warmup steps 1-2 from 2.5e-05; drops "
                                "after steps 5 (x0.1), 7 (x0.1); lr at 25% (step 2) "));
  EXPECT_THAT(recipe, HasSubstr("75% (step 6) 0.0025, last (step 8) 0.00025"));
  // Norm weights and biases without decay (no_weight_decay_on_norm_and_bias), the rest with.
  EXPECT_THAT(recipe, ::testing::MatchesRegex(
                          ".*parameter groups:\n    decay \\([0-9]+ tensors, [0-9]+ values\\): lr "
                          "0.025, weight decay 0.0001\n    no_decay \\([0-9]+ tensors, [0-9]+ "
                          "values\\): lr 0.025, weight decay 0"));
}

}  // namespace
}  // namespace vision::engine
