// The console side of training logs: one progress line per logged step, an ETA that does not
// jump with every slow step, and the summary printed when training ends.
#ifndef VISION_ENGINE_LOGGING_PROGRESS_H_
#define VISION_ENGINE_LOGGING_PROGRESS_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vision::engine::logging {

// Smoothed step time: the median of the last `window` step durations. A median rather than a
// moving average because step times have rare large outliers (the first step's lazy
// initialisation, a checkpoint save, an evaluation pass) that should not move the ETA at all,
// while a lasting change of speed (a new input size) takes over after half a window.
class StepTimeEstimator {
 public:
  explicit StepTimeEstimator(int window = 50);

  void AddStep(double seconds);

  // nullopt until the first step has been added.
  std::optional<double> StepSeconds() const;

  // remaining_steps * StepSeconds(); nullopt until the first step has been added.
  std::optional<double> EtaSeconds(int64_t remaining_steps) const;

 private:
  size_t window_;
  std::deque<double> recent_;
};

struct ProgressLine {
  // Steps done so far, and the number the run will do (<= 0: unknown, no percentage).
  int64_t step = 0;
  int64_t total_steps = 0;
  // The weighted sum the optimizer sees, then the terms in display order.
  double loss = 0;
  std::vector<std::pair<std::string, double>> loss_terms;
  double lr = 0;
  double images_per_second = 0;
  // Share of the step time spent waiting for the next batch, in [0, 1]: high means the input
  // pipeline, not the model, limits speed.
  double data_wait_fraction = 0;
  double elapsed_seconds = 0;
  // From StepTimeEstimator::EtaSeconds; nullopt prints "eta ?".
  std::optional<double> eta_seconds;
  // Bad samples skipped so far (loader on_bad_sample: SKIP), over all ranks; shown when > 0.
  int64_t skipped_samples = 0;
};

// E.g. "step 120/3000 (4.0%)  loss 1.234 (prob 0.500 thresh 0.300 binary 0.430)  lr 6.9e-03
// 12.3 img/s  data 3%  elapsed 0:01:02  eta 0:41:10" (on one line).
std::string FormatProgressLine(const ProgressLine& line);

// "H:MM:SS", hours unbounded ("27:03:04"); "?" for negative or non-finite input.
std::string FormatDuration(double seconds);

struct TrainingSummary {
  int64_t steps = 0;
  double total_seconds = 0;
  double images_per_second = 0;
  // From PeakResidentMemoryMiB(); nullopt prints "?".
  std::optional<double> peak_memory_mib;
  // On a GPU, the caching allocator's peak (engine::PeakDeviceMemoryMiB); shown when set.
  std::optional<double> peak_device_memory_mib;
  // Empty when no evaluation ran.
  std::string best_metric_name;
  double best_metric_value = 0;
  int64_t best_metric_step = 0;
  // Bad samples skipped during the run (on_bad_sample: SKIP), over all ranks; shown when > 0.
  int64_t skipped_samples = 0;
};

// E.g. "trained 3000 steps in 1:23:45  12.3 img/s  peak RSS 1234 MiB  best hmean 0.8123 at step
// 2500"; on a GPU "... peak RSS 1234 MiB  peak CUDA 9876 MiB ...".
std::string FormatTrainingSummary(const TrainingSummary& summary);

// The process's peak resident set size (VmHWM of /proc/self/status) in MiB. Fails where there
// is no such file (not Linux).
absl::StatusOr<double> PeakResidentMemoryMiB();

// The VmHWM line of a /proc/<pid>/status text, in MiB.
absl::StatusOr<double> ParseVmHwmMiB(absl::string_view proc_status);

}  // namespace vision::engine::logging

#endif  // VISION_ENGINE_LOGGING_PROGRESS_H_
