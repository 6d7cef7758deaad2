#include "engine/logging/progress.h"

#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::engine::logging {
namespace {

TEST(ProgressTest, FullLine) {
  ProgressLine line;
  line.step = 120;
  line.total_steps = 3000;
  line.loss = 1.2344;
  line.loss_terms = {{"prob", 0.5}, {"thresh", 0.3}, {"binary", 0.43}};
  line.lr = 6.9e-3;
  line.images_per_second = 12.34;
  line.data_wait_fraction = 0.031;
  line.elapsed_seconds = 62;
  line.eta_seconds = 2470;
  EXPECT_EQ(FormatProgressLine(line),
            "step 120/3000 (4.0%)  loss 1.234 (prob 0.500 thresh 0.300 binary 0.430)  lr 6.9e-03  "
            "12.3 img/s  data 3%  elapsed 0:01:02  eta 0:41:10");
}

TEST(ProgressTest, MinimalLineAndTinyLosses) {
  ProgressLine line;
  line.step = 7;
  line.loss = 0.00042;
  line.loss_terms = {{"aux", 0.0}};
  line.lr = 0.1;
  line.images_per_second = 3;
  line.data_wait_fraction = 0.5;
  EXPECT_EQ(
      FormatProgressLine(line),
      "step 7  loss 4.20e-04 (aux 0.000)  lr 1.0e-01  3.0 img/s  data 50%  elapsed 0:00:00  eta ?");
  line.skipped_samples = 1;
  EXPECT_EQ(FormatProgressLine(line),
            "step 7  loss 4.20e-04 (aux 0.000)  lr 1.0e-01  3.0 img/s  data 50%  elapsed 0:00:00  "
            "eta ?  skipped 1 bad sample");
}

TEST(ProgressTest, FormatDuration) {
  EXPECT_EQ(FormatDuration(0), "0:00:00");
  EXPECT_EQ(FormatDuration(59.6), "0:01:00");
  EXPECT_EQ(FormatDuration(2470), "0:41:10");
  EXPECT_EQ(FormatDuration(27 * 3600 + 3 * 60 + 4), "27:03:04");
  EXPECT_EQ(FormatDuration(-1), "?");
  EXPECT_EQ(FormatDuration(std::numeric_limits<double>::infinity()), "?");
}

TEST(StepTimeEstimatorTest, EmptyHasNoEstimate) {
  StepTimeEstimator estimator;
  EXPECT_FALSE(estimator.StepSeconds().has_value());
  EXPECT_FALSE(estimator.EtaSeconds(10).has_value());
}

TEST(StepTimeEstimatorTest, MedianIgnoresOutliers) {
  StepTimeEstimator estimator;
  estimator.AddStep(9.0);  // first step: lazy initialisation
  for (int i = 0; i < 4; ++i) estimator.AddStep(0.5);
  estimator.AddStep(30.0);  // checkpoint save
  // Sorted: 0.5 0.5 0.5 0.5 9 30 -> mean of the middle two.
  EXPECT_DOUBLE_EQ(*estimator.StepSeconds(), 0.5);
  EXPECT_DOUBLE_EQ(*estimator.EtaSeconds(2880), 1440.0);
  EXPECT_DOUBLE_EQ(*estimator.EtaSeconds(-5), 0.0);
}

TEST(StepTimeEstimatorTest, EvenCountAveragesMiddlePair) {
  StepTimeEstimator estimator;
  for (double s : {4.0, 1.0, 3.0, 2.0}) estimator.AddStep(s);
  EXPECT_DOUBLE_EQ(*estimator.StepSeconds(), 2.5);
  EXPECT_DOUBLE_EQ(*estimator.EtaSeconds(10), 25.0);
}

TEST(StepTimeEstimatorTest, WindowForgetsOldSteps) {
  StepTimeEstimator estimator(3);
  for (double s : {10.0, 10.0, 10.0, 1.0, 2.0}) estimator.AddStep(s);
  // Window holds 10, 1, 2.
  EXPECT_DOUBLE_EQ(*estimator.StepSeconds(), 2.0);
}

TEST(ProgressTest, SummaryLine) {
  TrainingSummary summary;
  summary.steps = 3000;
  summary.total_seconds = 5025;
  summary.images_per_second = 12.34;
  summary.peak_memory_mib = 1234.4;
  summary.best_metric_name = "hmean";
  summary.best_metric_value = 0.81234;
  summary.best_metric_step = 2500;
  EXPECT_EQ(FormatTrainingSummary(summary),
            "trained 3000 steps in 1:23:45  12.3 img/s  peak RSS 1234 MiB  best hmean 0.8123 at "
            "step 2500");
  summary.peak_memory_mib.reset();
  summary.best_metric_name.clear();
  EXPECT_EQ(FormatTrainingSummary(summary),
            "trained 3000 steps in 1:23:45  12.3 img/s  peak RSS ?");
  summary.skipped_samples = 3;
  EXPECT_EQ(FormatTrainingSummary(summary),
            "trained 3000 steps in 1:23:45  12.3 img/s  peak RSS ?  skipped 3 bad samples");
  summary.peak_memory_mib = 700;
  summary.peak_device_memory_mib = 9876.4;
  EXPECT_EQ(FormatTrainingSummary(summary),
            "trained 3000 steps in 1:23:45  12.3 img/s  peak RSS 700 MiB  peak CUDA 9876 MiB  "
            "skipped 3 bad samples");
}

TEST(ProgressTest, ParseVmHwm) {
  const auto mib =
      ParseVmHwmMiB("Name:\ttest\nVmPeak:\t 999999 kB\nVmHWM:\t  204800 kB\nVmRSS:\t 1 kB\n");
  ASSERT_TRUE(mib.ok()) << mib.status();
  EXPECT_DOUBLE_EQ(*mib, 200.0);
  EXPECT_EQ(ParseVmHwmMiB("Name:\ttest\n").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ParseVmHwmMiB("VmHWM:\t12 MB\n").status().code(), absl::StatusCode::kDataLoss);
}

TEST(ProgressTest, PeakResidentMemoryOfThisProcess) {
  const auto mib = PeakResidentMemoryMiB();
  ASSERT_TRUE(mib.ok()) << mib.status();
  EXPECT_GT(*mib, 0.0);
  EXPECT_LT(*mib, 1024.0 * 1024.0);
}

}  // namespace
}  // namespace vision::engine::logging
