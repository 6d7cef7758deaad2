// The maths of tools/scaling (the driver that trains a recipe at several process counts and
// compares them): which process counts a machine can run, the step timelines the trainer
// writes (core/trace.h: trace_rank<k>.json, Chrome Trace Event Format) reduced to one row per
// process count, and that table as text and JSON. Pure: no processes, no files.
#ifndef VISION_TOOLS_SCALING_SCALING_H_
#define VISION_TOOLS_SCALING_SCALING_H_

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vision::tools::scaling {

// "1,2,4,8": distinct process counts >= 1, in the order given. Anything else (a 0, a negative
// or non-numeric entry, an empty entry, a repeat) is an error naming the entry.
absl::StatusOr<std::vector<int>> ParseProcessCounts(absl::string_view text);

// Whether this machine can run every count on `device` (the config's: "cpu", "cuda" = one GPU
// per process, "cuda:N" = every process on GPU N) given `visible_gpus` (what the trainer's
// LibTorch sees; `build` names that build in the message). CPU counts are not limited here.
absl::Status CheckProcessCounts(const std::vector<int>& counts, const std::string& device,
                                int visible_gpus, const std::string& build);

// One complete span ("ph": "X") of a trace, in microseconds.
struct Span {
  std::string name;
  int64_t start_us = 0;
  int64_t end_us = 0;
};

// The complete spans of one rank's trace file; `source` names the file in errors.
absl::StatusOr<std::vector<Span>> ParseTrace(absl::string_view json_text,
                                             const std::string& source);

// The step phases the trainer records inside each `step` span (engine/trainer.cc), in order.
inline constexpr std::array<const char*, 5> kPhases = {"data_wait", "forward", "backward",
                                                       "finish_backward", "optimizer"};

// One rank's traced steps, as means per step in milliseconds.
struct RankTiming {
  int steps = 0;
  double step_ms = 0;
  // Sum of each phase's spans inside a step (several with gradient accumulation), kPhases order.
  std::array<double, kPhases.size()> phase_ms{};
  // Gradient collectives ("bucket <k> allreduce"/"allgather", on CUDA the "(cuda)" device
  // spans): the union of their spans that start inside the step, and of that union the part
  // inside the step's backward span(s).
  double comm_ms = 0;
  double comm_inside_backward_ms = 0;
};

// Reduces a rank's spans; an error when there is no `step` span (`source` names the file).
absl::StatusOr<RankTiming> TimeRank(const std::vector<Span>& spans, const std::string& source);

// What one run (one process count) measured.
struct RunMeasurement {
  int processes = 0;
  // Images one process consumes per optimizer step (batch size x gradient accumulation).
  int images_per_process_step = 0;
  std::vector<RankTiming> ranks;  // one per rank
  // Peak resident set size: the largest of any process of the run over its whole life (the
  // kernel's account, teardown included), and rank 0's during training (the trainer logs it);
  // absent when unknown.
  std::optional<double> peak_rss_mib_max;
  std::optional<double> peak_rss_mib_rank0;
  // On a GPU, rank 0's CUDA caching-allocator peak (the trainer's "peak CUDA"); else absent.
  std::optional<double> peak_cuda_mib_rank0;
};

// One row of the table. Times are means over the traced steps and over ranks.
struct ScalingRow {
  int processes = 0;
  int steps = 0;  // traced steps per rank
  double step_ms = 0;
  std::array<double, kPhases.size()> phase_ms{};
  double other_ms = 0;  // the step's time outside the phases
  // Images of all processes per step / step time; per process: that / processes.
  double images_per_second = 0;
  double images_per_second_per_process = 0;
  // Against the row of the fewest processes (normally 1): images/s ratio, and that ratio
  // divided by the ratio of process counts.
  double speedup = 0;
  double efficiency = 0;
  double comm_ms = 0;
  double comm_inside_backward_ms = 0;
  // comm_inside_backward / comm over every rank and step; absent without collectives.
  std::optional<double> hidden_comm_share;
  std::optional<double> peak_rss_mib_max;
  std::optional<double> peak_rss_mib_rank0;
  std::optional<double> peak_cuda_mib_rank0;
};

// One row per run, sorted by process count; the baseline is the smallest count. An error when
// a run has no ranks, a rank count other than its process count, or a zero step time.
absl::StatusOr<std::vector<ScalingRow>> ScalingTable(const std::vector<RunMeasurement>& runs);

// The table for the console, one line per row under a header.
std::string FormatTable(const std::vector<ScalingRow>& rows);

// The rows as a JSON array of objects (keys as in ScalingRow, phases as "<phase>_ms"; absent
// values are null).
nlohmann::ordered_json RowsToJson(const std::vector<ScalingRow>& rows);

// Rank 0's peak RSS from the trainer's closing line as the launcher relays it
// ("[rank 0]: trained 8 steps in 0:00:05  9.1 img/s  peak RSS 812 MiB ..."); absent when the
// log has no such line or the trainer printed "peak RSS ?".
std::optional<double> ParseRank0PeakRssMiB(absl::string_view log);

// The same for the CUDA caching allocator's peak ("... peak CUDA 9876 MiB"), which the trainer
// prints when it trains on a GPU; absent otherwise.
std::optional<double> ParseRank0PeakCudaMiB(absl::string_view log);

}  // namespace vision::tools::scaling

#endif  // VISION_TOOLS_SCALING_SCALING_H_
