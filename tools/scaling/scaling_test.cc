#include "tools/scaling/scaling.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tools/scaling/plot.h"

namespace vision::tools::scaling {
namespace {

using ::testing::HasSubstr;

// Two steps of one rank, in the trainer's format (core/trace.cc), with metadata events, spans
// that are not counted (a bucket's ready/launch/wait) and a forward after the last step (an
// evaluation's, say) that is outside every step.
//   step 1 [0, 100) ms: data_wait 10, forward 30, backward [40, 80) 40, finish_backward 10,
//     optimizer 8; allreduce bucket 0 [50, 70), bucket 1 [75, 88): union 33, in backward 20 + 5.
//   step 2 [100, 180) ms: data_wait 2, forward 28, backward [130, 160) 30, finish_backward 10,
//     optimizer 8; allreduce bucket 0 [140, 150), bucket 1 [145, 165): union [140, 165) 25, in
//     backward [140, 160) 20.
constexpr char kTrace[] = R"({"displayTimeUnit":"ms","traceEvents":[
{"ph":"M","name":"process_name","pid":1,"tid":0,"ts":0,"args":{"name":"rank 1"}},
{"ph":"M","name":"thread_name","pid":1,"tid":1001,"ts":0,"args":{"name":"bucket 0"}},
{"ph":"X","name":"data_wait","cat":"step","pid":1,"tid":1,"ts":0,"dur":10000},
{"ph":"X","name":"forward","cat":"step","pid":1,"tid":1,"ts":10000,"dur":30000},
{"ph":"X","name":"bucket 0 ready","cat":"comm","pid":1,"tid":1001,"ts":45000,"dur":5000},
{"ph":"X","name":"bucket 0 launch","cat":"comm","pid":1,"tid":1001,"ts":50000,"dur":100},
{"ph":"X","name":"bucket 0 allreduce","cat":"comm","pid":1,"tid":1001,"ts":50000,"dur":20000,"args":{"bytes":4096}},
{"ph":"X","name":"bucket 1 allreduce","cat":"comm","pid":1,"tid":1002,"ts":75000,"dur":13000},
{"ph":"X","name":"backward","cat":"step","pid":1,"tid":1,"ts":40000,"dur":40000},
{"ph":"X","name":"wait bucket 1","cat":"comm","pid":1,"tid":1,"ts":80000,"dur":8000},
{"ph":"X","name":"finish_backward","cat":"step","pid":1,"tid":1,"ts":80000,"dur":10000},
{"ph":"X","name":"optimizer","cat":"step","pid":1,"tid":1,"ts":90000,"dur":8000},
{"ph":"X","name":"step","cat":"step","pid":1,"tid":1003,"ts":0,"dur":100000,"args":{"step":6}},
{"ph":"X","name":"data_wait","cat":"step","pid":1,"tid":1,"ts":100000,"dur":2000},
{"ph":"X","name":"forward","cat":"step","pid":1,"tid":1,"ts":102000,"dur":28000},
{"ph":"X","name":"backward","cat":"step","pid":1,"tid":1,"ts":130000,"dur":30000},
{"ph":"X","name":"bucket 0 allreduce","cat":"comm","pid":1,"tid":1001,"ts":140000,"dur":10000},
{"ph":"X","name":"bucket 1 allreduce","cat":"comm","pid":1,"tid":1002,"ts":145000,"dur":20000},
{"ph":"X","name":"finish_backward","cat":"step","pid":1,"tid":1,"ts":160000,"dur":10000},
{"ph":"X","name":"optimizer","cat":"step","pid":1,"tid":1,"ts":170000,"dur":8000},
{"ph":"X","name":"step","cat":"step","pid":1,"tid":1003,"ts":100000,"dur":80000,"args":{"step":7}},
{"ph":"X","name":"forward","cat":"step","pid":1,"tid":1,"ts":190000,"dur":5000}
]}
)";

TEST(ParseTraceTest, ReadsTheCompleteSpans) {
  const absl::StatusOr<std::vector<Span>> spans = ParseTrace(kTrace, "trace_rank1.json");
  ASSERT_TRUE(spans.ok()) << spans.status();
  ASSERT_EQ(spans->size(), 20u);  // 22 events, 2 of them metadata
  EXPECT_EQ((*spans)[4].name, "bucket 0 allreduce");
  EXPECT_EQ((*spans)[4].start_us, 50000);
  EXPECT_EQ((*spans)[4].end_us, 70000);
}

TEST(ParseTraceTest, NamesTheFileAndTheEventOfBadInput) {
  const absl::StatusOr<std::vector<Span>> cut =
      ParseTrace(R"({"traceEvents":[{"ph":"X")", "t.json");
  ASSERT_FALSE(cut.ok());
  EXPECT_THAT(cut.status().ToString(), HasSubstr("t.json: not valid JSON"));
  const absl::StatusOr<std::vector<Span>> no_events = ParseTrace(R"({"events":[]})", "t.json");
  ASSERT_FALSE(no_events.ok());
  EXPECT_THAT(no_events.status().ToString(), HasSubstr("no \"traceEvents\" array"));
  const absl::StatusOr<std::vector<Span>> no_dur =
      ParseTrace(R"({"traceEvents":[{"ph":"M"},{"ph":"X","name":"step","ts":5}]})", "t.json");
  ASSERT_FALSE(no_dur.ok());
  EXPECT_THAT(no_dur.status().ToString(), HasSubstr("t.json: traceEvents[1]"));
}

TEST(TimeRankTest, MeansPerStepOfPhasesAndCommunication) {
  const absl::StatusOr<std::vector<Span>> spans = ParseTrace(kTrace, "trace_rank1.json");
  ASSERT_TRUE(spans.ok()) << spans.status();
  const absl::StatusOr<RankTiming> timing = TimeRank(*spans, "trace_rank1.json");
  ASSERT_TRUE(timing.ok()) << timing.status();
  EXPECT_EQ(timing->steps, 2);
  EXPECT_DOUBLE_EQ(timing->step_ms, (100 + 80) / 2.0);
  EXPECT_DOUBLE_EQ(timing->phase_ms[0], (10 + 2) / 2.0);   // data_wait
  EXPECT_DOUBLE_EQ(timing->phase_ms[1], (30 + 28) / 2.0);  // forward (not the one after)
  EXPECT_DOUBLE_EQ(timing->phase_ms[2], (40 + 30) / 2.0);  // backward
  EXPECT_DOUBLE_EQ(timing->phase_ms[3], (10 + 10) / 2.0);  // finish_backward
  EXPECT_DOUBLE_EQ(timing->phase_ms[4], (8 + 8) / 2.0);    // optimizer
  EXPECT_DOUBLE_EQ(timing->comm_ms, (33 + 25) / 2.0);
  EXPECT_DOUBLE_EQ(timing->comm_inside_backward_ms, (25 + 20) / 2.0);
}

TEST(TimeRankTest, CountsTheDeviceSpansOfCuda) {
  const std::vector<Span> spans = {{"step", 0, 100},
                                   {"backward", 10, 60},
                                   {"bucket 0 allreduce (cuda)", 50, 80},
                                   {"bucket 0 allgather", 90, 95}};
  const absl::StatusOr<RankTiming> timing = TimeRank(spans, "t.json");
  ASSERT_TRUE(timing.ok()) << timing.status();
  EXPECT_DOUBLE_EQ(timing->comm_ms, (30 + 5) * 1e-3);
  EXPECT_DOUBLE_EQ(timing->comm_inside_backward_ms, 10 * 1e-3);
}

TEST(TimeRankTest, ATraceWithoutStepsIsAnError) {
  const absl::StatusOr<RankTiming> timing = TimeRank({{"forward", 0, 10}}, "trace_rank0.json");
  ASSERT_FALSE(timing.ok());
  EXPECT_THAT(timing.status().ToString(), HasSubstr("trace_rank0.json: no \"step\" span"));
}

RankTiming Timing(int steps, double step_ms, std::array<double, kPhases.size()> phases,
                  double comm_ms, double hidden_ms) {
  RankTiming t;
  t.steps = steps;
  t.step_ms = step_ms;
  t.phase_ms = phases;
  t.comm_ms = comm_ms;
  t.comm_inside_backward_ms = hidden_ms;
  return t;
}

// 1 process: 100 ms steps of 4 images = 40 img/s. 2 processes: steps of 120 and 130 ms, mean
// 125 ms, 8 images = 64 img/s, 32 per process, speed-up 1.6, efficiency 0.8; communication
// inside backward (6 x 5 + 4 x 5) / (10 x 5 + 20 x 5) = 1/3; phases' means 15, 20, 30, 40, 15
// = 120 ms, other 5 ms.
std::vector<RunMeasurement> Runs() {
  RunMeasurement two;
  two.processes = 2;
  two.images_per_process_step = 4;
  two.ranks = {Timing(5, 120, {10, 20, 30, 40, 15}, 10, 6),
               Timing(5, 130, {20, 20, 30, 40, 15}, 20, 4)};
  two.peak_rss_mib_max = 900;
  two.peak_rss_mib_rank0 = 880;
  RunMeasurement one;
  one.processes = 1;
  one.images_per_process_step = 4;
  one.ranks = {Timing(5, 100, {5, 30, 40, 0, 20}, 0, 0)};
  return {two, one};
}

TEST(ScalingTableTest, ImagesSpeedupEfficiencyAndSplitAgainstTheFewestProcesses) {
  const absl::StatusOr<std::vector<ScalingRow>> rows = ScalingTable(Runs());
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);
  const ScalingRow& one = (*rows)[0];
  const ScalingRow& two = (*rows)[1];
  EXPECT_EQ(one.processes, 1);
  EXPECT_DOUBLE_EQ(one.images_per_second, 40);
  EXPECT_DOUBLE_EQ(one.speedup, 1);
  EXPECT_DOUBLE_EQ(one.efficiency, 1);
  EXPECT_DOUBLE_EQ(one.other_ms, 5);
  EXPECT_FALSE(one.hidden_comm_share.has_value());
  EXPECT_FALSE(one.peak_rss_mib_max.has_value());
  EXPECT_EQ(two.processes, 2);
  EXPECT_EQ(two.steps, 5);
  EXPECT_DOUBLE_EQ(two.step_ms, 125);
  EXPECT_DOUBLE_EQ(two.images_per_second, 64);
  EXPECT_DOUBLE_EQ(two.images_per_second_per_process, 32);
  EXPECT_DOUBLE_EQ(two.speedup, 1.6);
  EXPECT_DOUBLE_EQ(two.efficiency, 0.8);
  EXPECT_DOUBLE_EQ(two.phase_ms[0], 15);
  EXPECT_DOUBLE_EQ(two.phase_ms[3], 40);
  EXPECT_DOUBLE_EQ(two.other_ms, 5);
  EXPECT_DOUBLE_EQ(two.comm_ms, 15);
  EXPECT_DOUBLE_EQ(two.comm_inside_backward_ms, 5);
  ASSERT_TRUE(two.hidden_comm_share.has_value());
  EXPECT_DOUBLE_EQ(*two.hidden_comm_share, 1.0 / 3);
  EXPECT_EQ(two.peak_rss_mib_max, 900);
  EXPECT_EQ(two.peak_rss_mib_rank0, 880);
}

TEST(ScalingTableTest, BaselineIsTheSmallestCountWhenOneIsNotMeasured) {
  std::vector<RunMeasurement> runs = Runs();
  runs.pop_back();  // only the 2-process run
  RunMeasurement four = runs[0];
  four.processes = 4;
  four.ranks.push_back(four.ranks[0]);
  four.ranks.push_back(four.ranks[1]);  // 125 ms mean again: 128 img/s, 2x of 2 processes
  runs.push_back(four);
  const absl::StatusOr<std::vector<ScalingRow>> rows = ScalingTable(runs);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_DOUBLE_EQ((*rows)[1].images_per_second, 128);
  EXPECT_DOUBLE_EQ((*rows)[1].speedup, 2);
  EXPECT_DOUBLE_EQ((*rows)[1].efficiency, 1);
  EXPECT_THAT(FormatTable(*rows), HasSubstr("against 2 processes"));
}

TEST(ScalingTableTest, AMissingRankIsAnError) {
  std::vector<RunMeasurement> runs = Runs();
  runs[0].ranks.pop_back();
  const absl::StatusOr<std::vector<ScalingRow>> rows = ScalingTable(runs);
  ASSERT_FALSE(rows.ok());
  EXPECT_THAT(rows.status().ToString(), HasSubstr("the run of 2 processes has timings of 1 ranks"));
}

TEST(FormatTableTest, OneLinePerRowWithSpeedupEfficiencyAndHiddenShare) {
  const absl::StatusOr<std::vector<ScalingRow>> rows = ScalingTable(Runs());
  ASSERT_TRUE(rows.ok()) << rows.status();
  const std::string table = FormatTable(*rows);
  EXPECT_THAT(table, HasSubstr("against 1 process;"));
  EXPECT_THAT(table, HasSubstr("    1     40.00      40.00    1.00x   100%    100.0"));
  EXPECT_THAT(table, HasSubstr("    2     64.00      32.00    1.60x    80%    125.0"));
  EXPECT_THAT(table, HasSubstr("    33%      880"));
}

TEST(RowsToJsonTest, KeysPerRowAndNullForAbsentValues) {
  const absl::StatusOr<std::vector<ScalingRow>> rows = ScalingTable(Runs());
  ASSERT_TRUE(rows.ok()) << rows.status();
  const nlohmann::ordered_json json = RowsToJson(*rows);
  ASSERT_EQ(json.size(), 2u);
  EXPECT_EQ(json[0]["processes"], 1);
  EXPECT_TRUE(json[0]["hidden_communication_share"].is_null());
  EXPECT_TRUE(json[0]["peak_rss_mib_max"].is_null());
  EXPECT_DOUBLE_EQ(json[1]["images_per_second"].get<double>(), 64);
  EXPECT_DOUBLE_EQ(json[1]["finish_backward_ms"].get<double>(), 40);
  EXPECT_DOUBLE_EQ(json[1]["hidden_communication_share"].get<double>(), 1.0 / 3);
  EXPECT_DOUBLE_EQ(json[1]["peak_rss_mib_rank0"].get<double>(), 880);
}

TEST(ParseProcessCountsTest, CommaSeparatedDistinctPositiveCounts) {
  const absl::StatusOr<std::vector<int>> counts = ParseProcessCounts(" 1, 2,4,8");
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_EQ(*counts, (std::vector<int>{1, 2, 4, 8}));
}

TEST(ParseProcessCountsTest, RefusesZeroAndMalformedLists) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"0", "entry 1 is 0; a run needs at least 1 process"},
      {"1,-2", "entry 2 is -2"},
      {"1,,2", "entry 2 ('') is not a whole number"},
      {"1,two", "entry 2 ('two') is not a whole number"},
      {"2,2", "2 is given twice"},
      {"", "give the process counts to measure"},
  };
  for (const auto& [text, expected] : cases) {
    const absl::StatusOr<std::vector<int>> counts = ParseProcessCounts(text);
    ASSERT_FALSE(counts.ok()) << "--nproc=" << text << " was accepted";
    EXPECT_THAT(counts.status().ToString(), HasSubstr(expected)) << "--nproc=" << text;
  }
}

TEST(CheckProcessCountsTest, CpuCountsAreNotLimited) {
  EXPECT_TRUE(CheckProcessCounts({1, 64}, "cpu", 0, "LibTorch").ok());
}

TEST(CheckProcessCountsTest, CudaNeedsAGpuPerProcess) {
  const absl::Status none = CheckProcessCounts({1, 2}, "cuda", 0, "LibTorch X");
  EXPECT_EQ(none.code(), absl::StatusCode::kFailedPrecondition) << none;
  EXPECT_THAT(none.ToString(), HasSubstr("has 0 GPUs visible to LibTorch X: cannot run 1, 2 "));
  EXPECT_THAT(none.ToString(),
              HasSubstr("(--nproc). Measure on the CPU with --override='device: "));
  const absl::Status two = CheckProcessCounts({1, 2, 4, 8}, "cuda", 2, "LibTorch X");
  EXPECT_THAT(two.ToString(), HasSubstr("cannot run 4, 8 process(es)"));
  EXPECT_THAT(two.ToString(), HasSubstr("Give counts up to 2 in --nproc, or measure on the CPU"));
  EXPECT_TRUE(CheckProcessCounts({1, 2}, "cuda", 2, "LibTorch X").ok());
}

TEST(CheckProcessCountsTest, OneNumberedGpuRunsOneProcess) {
  EXPECT_TRUE(CheckProcessCounts({1}, "cuda:1", 2, "L").ok());
  EXPECT_THAT(CheckProcessCounts({1}, "cuda:2", 2, "L").ToString(),
              HasSubstr("device \"cuda:2\": this machine has 2 GPUs"));
  EXPECT_THAT(CheckProcessCounts({1, 2}, "cuda:0", 2, "L").ToString(),
              HasSubstr("2 processes would share one GPU"));
}

TEST(ParseRank0PeakRssTest, TheTrainersClosingLineOfRankZero) {
  EXPECT_EQ(
      ParseRank0PeakRssMiB("[rank 0]: step 8/8 ...\n"
                           "[rank 1]: trained 8 steps in 0:00:05  9.1 img/s  peak RSS 10 MiB\n"
                           "[rank 0]: trained 8 steps in 0:00:05  9.1 img/s  peak RSS 812 "
                           "MiB  skipped 1 bad sample\n"),
      812);
  EXPECT_FALSE(ParseRank0PeakRssMiB("[rank 0]: trained 8 steps in 0:00:05  1 img/s  peak RSS ?\n")
                   .has_value());
  EXPECT_FALSE(ParseRank0PeakRssMiB("").has_value());
  // On a GPU the closing line also carries the caching allocator's peak.
  const std::string gpu_log =
      "[rank 0]: trained 8 steps in 0:00:05  9.1 img/s  peak RSS 812 MiB  peak CUDA 4321 MiB\n";
  EXPECT_EQ(ParseRank0PeakRssMiB(gpu_log), 812);
  EXPECT_EQ(ParseRank0PeakCudaMiB(gpu_log), 4321);
  EXPECT_FALSE(
      ParseRank0PeakCudaMiB("[rank 0]: trained 8 steps in 0:00:05  1 img/s  peak RSS 9 MiB\n")
          .has_value());
}

TEST(DrawScalingPlotTest, TwoPanelsOnWhite) {
  const absl::StatusOr<std::vector<ScalingRow>> rows = ScalingTable(Runs());
  ASSERT_TRUE(rows.ok()) << rows.status();
  const cv::Mat plot = DrawScalingPlot(*rows, "title");
  EXPECT_EQ(plot.type(), CV_8UC3);
  EXPECT_EQ(plot.cols, 960);
  EXPECT_EQ(plot.rows, 420);
  // The measured line's colour is drawn in both panels.
  int left = 0, right = 0;
  for (int y = 0; y < plot.rows; ++y) {
    for (int x = 0; x < plot.cols; ++x) {
      if (plot.at<cv::Vec3b>(y, x) == cv::Vec3b(180, 90, 20)) ++(x < 480 ? left : right);
    }
  }
  EXPECT_GT(left, 0);
  EXPECT_GT(right, 0);
}

}  // namespace
}  // namespace vision::tools::scaling
