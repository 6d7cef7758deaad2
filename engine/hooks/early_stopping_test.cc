#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/config/pipeline.pb.h"
#include "core/hook.h"
#include "engine/hooks/hooks.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace vision::engine::hooks {
namespace {

using ::testing::HasSubstr;

// The run as the hook sees it: a step counter, the main metric and the stop request.
class FakeRun : public core::TrainingRun {
 public:
  const core::TrainPipelineConfig& config() const override { return config_; }
  int64_t step() const override { return step_; }
  int64_t total_steps() const override { return 1000; }
  int64_t first_step() const override { return 0; }
  int64_t epoch() const override { return 0; }
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  const std::string& output_dir() const override { return dir_; }
  core::Model& model() override { std::abort(); }
  std::string main_metric() const override { return "hmean"; }
  void Print(const std::string&) const override {}
  absl::Status LogScalars(const std::map<std::string, double>&) override {
    return absl::OkStatus();
  }
  absl::StatusOr<std::map<std::string, double>> Evaluate() override {
    return absl::UnimplementedError("not in this test");
  }
  void RequestStop(const std::string& reason) override { reason_ = reason; }
  bool stop_requested() const override { return !reason_.empty(); }

  int64_t step_ = 0;
  std::string reason_;

 private:
  core::TrainPipelineConfig config_;
  std::string dir_ = "/tmp";
};

std::unique_ptr<core::Hook> Make(const std::string& options_text) {
  EarlyStoppingOptions options;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(options_text, &options));
  google::protobuf::Any any;
  any.PackFrom(options);
  absl::StatusOr<std::unique_ptr<core::Hook>> hook =
      core::HookRegistry::Get().Create("EarlyStopping", any);
  EXPECT_TRUE(hook.ok()) << hook.status();
  return hook.ok() ? std::move(*hook) : nullptr;
}

// Feeds one evaluation per 10 steps; returns the step at which a stop was requested, or -1.
int64_t StopStep(core::Hook& hook, FakeRun& run, const std::string& metric,
                 const std::vector<double>& values) {
  for (double v : values) {
    run.step_ += 10;
    const std::map<std::string, double> metrics = {{metric, v}, {"other", 0.5}};
    EXPECT_TRUE(hook.AfterEvaluation(run, &metrics).ok());
    if (run.stop_requested()) return run.step_;
  }
  return -1;
}

TEST(EarlyStoppingTest, StopsAfterPatienceEvaluationsWithoutImprovement) {
  auto hook = Make("patience: 2");
  FakeRun run;
  // Best 0.5 at step 20; 0.5 (not better) and 0.4 follow: stop at the second of them.
  EXPECT_EQ(StopStep(*hook, run, "hmean", {0.3, 0.5, 0.5, 0.4, 0.9}), 40);
  EXPECT_THAT(run.reason_, HasSubstr("hmean has not improved on 0.5 (step 20) in 2 evaluation"));
}

TEST(EarlyStoppingTest, AnImprovementResetsTheCount) {
  auto hook = Make("patience: 2");
  FakeRun run;
  EXPECT_EQ(StopStep(*hook, run, "hmean", {0.3, 0.2, 0.4, 0.3, 0.5, 0.1, 0.1}), 70);
}

TEST(EarlyStoppingTest, MinDeltaAndMinMode) {
  FakeRun run;
  // A loss: smaller is better, by more than 0.1 to count.
  auto hook = Make("metric: \"loss\" mode: MIN patience: 1 min_delta: 0.1");
  EXPECT_EQ(StopStep(*hook, run, "loss", {1.0, 0.95, 0.5}), 20);  // 0.95: not 0.1 below 1.0
  FakeRun run2;
  auto hook2 = Make("metric: \"loss\" mode: MIN patience: 1 min_delta: 0.1");
  EXPECT_EQ(StopStep(*hook2, run2, "loss", {1.0, 0.8, 0.75}), 30);
}

TEST(EarlyStoppingTest, AFailedEvaluationIsNotCounted) {
  auto hook = Make("patience: 1");
  FakeRun run;
  ASSERT_EQ(StopStep(*hook, run, "hmean", {0.5}), -1);
  EXPECT_TRUE(hook->AfterEvaluation(run, nullptr).ok());
  EXPECT_FALSE(run.stop_requested());
}

TEST(EarlyStoppingTest, AMissingMetricNamesTheOnesThereAre) {
  auto hook = Make("metric: \"mIoU\"");
  FakeRun run;
  const std::map<std::string, double> metrics = {{"hmean", 0.5}, {"precision", 0.6}};
  const absl::Status status = hook->AfterEvaluation(run, &metrics);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("no metric 'mIoU' (it gave: hmean, precision)"));
}

TEST(EarlyStoppingTest, BadOptionsAreRefused) {
  for (const char* text : {"patience: 0", "min_delta: -1"}) {
    EarlyStoppingOptions options;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &options));
    google::protobuf::Any any;
    any.PackFrom(options);
    EXPECT_EQ(core::HookRegistry::Get().Create("EarlyStopping", any).status().code(),
              absl::StatusCode::kInvalidArgument)
        << text;
  }
}

// A resumed run continues the count: the state saved after three evaluations, loaded into a
// fresh hook, stops at the same step as the hook that saw everything.
TEST(EarlyStoppingTest, StateRoundTripsAndResumesTheCount) {
  const std::vector<double> values = {0.3, 0.6, 0.5, 0.4, 0.55, 0.2};
  auto whole = Make("patience: 3");
  FakeRun whole_run;
  const int64_t expected = StopStep(*whole, whole_run, "hmean", values);
  ASSERT_EQ(expected, 50);

  auto first = Make("patience: 3");
  FakeRun run;
  ASSERT_EQ(StopStep(*first, run, "hmean", {values[0], values[1], values[2]}), -1);
  const std::string state = first->SaveState();
  auto second = Make("patience: 3");
  ASSERT_TRUE(second->LoadState(state).ok()) << state;
  EXPECT_EQ(StopStep(*second, run, "hmean", {values[3], values[4], values[5]}), expected);
  EXPECT_EQ(second->SaveState(), whole->SaveState());

  EXPECT_EQ(second->LoadState("1 0.5").code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(second->LoadState("1 0.5 3 2 x").code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace vision::engine::hooks
