#include "tools/scaling/scaling.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace vision::tools::scaling {
namespace {

using Interval = std::pair<int64_t, int64_t>;

int64_t UnionLength(std::vector<Interval> intervals) {
  std::sort(intervals.begin(), intervals.end());
  int64_t total = 0;
  bool open = false;
  int64_t end = 0;
  for (const auto& [a, b] : intervals) {
    if (!open || a > end) {
      total += b - a;
      end = b;
      open = true;
    } else if (b > end) {
      total += b - end;
      end = b;
    }
  }
  return total;
}

// A gradient collective of the comm strategy (distributed/strategies/gradient_reducer.cc):
// "bucket <k> allreduce", "bucket <k> allgather", or their "(cuda)" device spans.
bool IsCollective(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, "bucket ")) return false;
  absl::ConsumeSuffix(&name, " (cuda)");
  return absl::EndsWith(name, " allreduce") || absl::EndsWith(name, " allgather");
}

std::string Optional(const std::optional<double>& value, const char* format) {
  return value.has_value() ? absl::StrFormat(format, *value) : "-";
}

}  // namespace

absl::StatusOr<std::vector<int>> ParseProcessCounts(absl::string_view text) {
  const std::string given = absl::StrCat("--nproc=\"", text, "\"");
  if (absl::StripAsciiWhitespace(text).empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(given,
                     ": give the process counts to measure, separated by commas, e.g. "
                     "--nproc=1,2,4,8"));
  }
  std::vector<int> counts;
  std::set<int> seen;
  int index = 0;
  for (absl::string_view entry : absl::StrSplit(text, ',')) {
    ++index;
    entry = absl::StripAsciiWhitespace(entry);
    int count = 0;
    if (!absl::SimpleAtoi(entry, &count)) {
      return absl::InvalidArgumentError(
          absl::StrCat(given, ": entry ", index, " ('", entry,
                       "') is not a whole number; give process counts separated by commas, e.g. "
                       "--nproc=1,2,4,8"));
    }
    if (count < 1) {
      return absl::InvalidArgumentError(absl::StrCat(given, ": entry ", index, " is ", count,
                                                     "; a run needs at least 1 process"));
    }
    if (!seen.insert(count).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(given, ": ", count, " is given twice; give each count once"));
    }
    counts.push_back(count);
  }
  return counts;
}

absl::Status CheckProcessCounts(const std::vector<int>& counts, const std::string& device,
                                int visible_gpus, const std::string& build) {
  if (device == "cpu") return absl::OkStatus();
  if (device == "cuda") {
    std::vector<int> refused;
    for (int n : counts) {
      if (n > visible_gpus) refused.push_back(n);
    }
    if (refused.empty()) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "device \"cuda\" runs one process per GPU, and this machine has ", visible_gpus, " GPU",
        visible_gpus == 1 ? "" : "s", " visible to ", build, ": cannot run ",
        absl::StrJoin(refused, ", "), " process(es) (--nproc). ",
        visible_gpus > 0
            ? absl::StrCat("Give counts up to ", visible_gpus,
                           " in --nproc, or measure on the CPU with --override='device: \"cpu\"'")
            : "Measure on the CPU with --override='device: \"cpu\"'"));
  }
  int index = -1;
  absl::string_view rest = device;
  if (absl::ConsumePrefix(&rest, "cuda:") && absl::SimpleAtoi(rest, &index) && index >= 0) {
    if (index >= visible_gpus) {
      return absl::FailedPreconditionError(
          absl::StrCat("device \"", device, "\": this machine has ", visible_gpus, " GPU",
                       visible_gpus == 1 ? "" : "s", " visible to ", build,
                       "; use an index below that, or --override='device: \"cpu\"'"));
    }
    for (int n : counts) {
      if (n > 1) {
        return absl::FailedPreconditionError(absl::StrCat(
            "device \"", device, "\" puts every process on GPU ", index, ", so ", n,
            " processes would share one GPU: use device: \"cuda\" (one GPU per process) to "
            "measure scaling, or --nproc=1"));
      }
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("device \"", device, "\": expected \"cpu\", \"cuda\" or \"cuda:N\""));
}

absl::StatusOr<std::vector<Span>> ParseTrace(absl::string_view json_text,
                                             const std::string& source) {
  const nlohmann::json trace =
      nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (trace.is_discarded()) {
    return absl::DataLossError(
        absl::StrCat(source, ": not valid JSON (a trace the trainer did not finish writing?)"));
  }
  const auto events = trace.find("traceEvents");
  if (!trace.is_object() || events == trace.end() || !events->is_array()) {
    return absl::DataLossError(
        absl::StrCat(source, ": no \"traceEvents\" array (not a Chrome Trace Event file)"));
  }
  std::vector<Span> spans;
  for (size_t i = 0; i < events->size(); ++i) {
    const nlohmann::json& e = (*events)[i];
    if (!e.is_object() || e.value("ph", "") != "X") continue;
    const auto name = e.find("name"), ts = e.find("ts"), dur = e.find("dur");
    if (name == e.end() || !name->is_string() || ts == e.end() || !ts->is_number() ||
        dur == e.end() || !dur->is_number()) {
      return absl::DataLossError(absl::StrCat(source, ": traceEvents[", i,
                                              "] is a complete span (\"ph\": \"X\") without a "
                                              "string \"name\" and numbers \"ts\" and \"dur\""));
    }
    Span span;
    span.name = name->get<std::string>();
    span.start_us = ts->get<int64_t>();
    span.end_us = span.start_us + dur->get<int64_t>();
    spans.push_back(std::move(span));
  }
  return spans;
}

absl::StatusOr<RankTiming> TimeRank(const std::vector<Span>& spans, const std::string& source) {
  std::vector<Interval> steps;
  for (const Span& s : spans) {
    if (s.name == "step") steps.emplace_back(s.start_us, s.end_us);
  }
  if (steps.empty()) {
    return absl::DataLossError(absl::StrCat(
        source, ": no \"step\" span (the trace window, logging.trace, held no training step)"));
  }
  std::sort(steps.begin(), steps.end());
  RankTiming timing;
  timing.steps = static_cast<int>(steps.size());
  int64_t step_us = 0, comm_us = 0, hidden_us = 0;
  std::array<int64_t, kPhases.size()> phase_us{};
  for (const auto& [lo, hi] : steps) {
    step_us += hi - lo;
    std::vector<Interval> backward, comm;
    for (const Span& s : spans) {
      if (s.name == "step" || s.start_us < lo || s.start_us >= hi) continue;
      for (size_t p = 0; p < kPhases.size(); ++p) {
        if (s.name == kPhases[p]) phase_us[p] += s.end_us - s.start_us;
      }
      if (s.name == "backward") backward.emplace_back(s.start_us, s.end_us);
      if (IsCollective(s.name)) comm.emplace_back(s.start_us, s.end_us);
    }
    comm_us += UnionLength(comm);
    std::vector<Interval> inside;
    for (const auto& [b0, b1] : backward) {
      for (const auto& [c0, c1] : comm) {
        if (std::min(c1, b1) > std::max(c0, b0)) {
          inside.emplace_back(std::max(c0, b0), std::min(c1, b1));
        }
      }
    }
    hidden_us += UnionLength(inside);
  }
  const double per_step_ms = 1e-3 / timing.steps;
  timing.step_ms = step_us * per_step_ms;
  for (size_t p = 0; p < kPhases.size(); ++p) timing.phase_ms[p] = phase_us[p] * per_step_ms;
  timing.comm_ms = comm_us * per_step_ms;
  timing.comm_inside_backward_ms = hidden_us * per_step_ms;
  return timing;
}

absl::StatusOr<std::vector<ScalingRow>> ScalingTable(const std::vector<RunMeasurement>& runs) {
  std::vector<const RunMeasurement*> sorted;
  for (const RunMeasurement& run : runs) sorted.push_back(&run);
  std::sort(sorted.begin(), sorted.end(),
            [](const auto* a, const auto* b) { return a->processes < b->processes; });
  std::vector<ScalingRow> rows;
  for (const RunMeasurement* run : sorted) {
    if (run->ranks.size() != static_cast<size_t>(run->processes) || run->processes < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("the run of ", run->processes, " processes has timings of ",
                       run->ranks.size(), " ranks; every rank's trace is needed"));
    }
    ScalingRow row;
    row.processes = run->processes;
    row.steps = run->ranks[0].steps;
    double comm_total = 0, hidden_total = 0;
    for (const RankTiming& rank : run->ranks) {
      row.steps = std::min(row.steps, rank.steps);
      row.step_ms += rank.step_ms;
      for (size_t p = 0; p < kPhases.size(); ++p) row.phase_ms[p] += rank.phase_ms[p];
      row.comm_ms += rank.comm_ms;
      row.comm_inside_backward_ms += rank.comm_inside_backward_ms;
      comm_total += rank.comm_ms * rank.steps;
      hidden_total += rank.comm_inside_backward_ms * rank.steps;
    }
    const double n = run->processes;
    row.step_ms /= n;
    row.other_ms = row.step_ms;
    for (double& phase : row.phase_ms) {
      phase /= n;
      row.other_ms -= phase;
    }
    row.comm_ms /= n;
    row.comm_inside_backward_ms /= n;
    if (comm_total > 0) row.hidden_comm_share = hidden_total / comm_total;
    if (row.step_ms <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("the run of ", run->processes, " processes has a step time of 0"));
    }
    row.images_per_second = n * run->images_per_process_step / (row.step_ms * 1e-3);
    row.images_per_second_per_process = row.images_per_second / n;
    row.peak_rss_mib_max = run->peak_rss_mib_max;
    row.peak_rss_mib_rank0 = run->peak_rss_mib_rank0;
    row.peak_cuda_mib_rank0 = run->peak_cuda_mib_rank0;
    rows.push_back(row);
  }
  for (ScalingRow& row : rows) {
    row.speedup = row.images_per_second / rows.front().images_per_second;
    row.efficiency = row.speedup * rows.front().processes / row.processes;
  }
  return rows;
}

std::string FormatTable(const std::vector<ScalingRow>& rows) {
  if (rows.empty()) return "";
  std::string out = absl::StrFormat(
      "speed-up and efficiency against %d process%s; times in ms per step, mean over the traced "
      "steps and ranks\n",
      rows.front().processes, rows.front().processes == 1 ? "" : "es");
  absl::StrAppendFormat(&out, "%5s %9s %10s %8s %6s %8s %8s %8s %8s %9s %8s %7s %7s %8s %8s\n",
                        "procs", "img/s", "img/s/proc", "speed-up", "effic", "step", "data",
                        "forward", "backward", "comm_wait", "optim", "other", "hidden", "peak_MiB",
                        "cuda_MiB");
  for (const ScalingRow& r : rows) {
    absl::StrAppendFormat(
        &out,
        "%5d %9.2f %10.2f %7.2fx %5.0f%% %8.1f %8.1f %8.1f %8.1f %9.1f %8.1f %7.1f %7s %8s %8s\n",
        r.processes, r.images_per_second, r.images_per_second_per_process, r.speedup,
        100 * r.efficiency, r.step_ms, r.phase_ms[0], r.phase_ms[1], r.phase_ms[2], r.phase_ms[3],
        r.phase_ms[4], r.other_ms,
        r.hidden_comm_share.has_value() ? absl::StrFormat("%.0f%%", 100 * *r.hidden_comm_share)
                                        : "-",
        Optional(r.peak_rss_mib_rank0, "%.0f"), Optional(r.peak_cuda_mib_rank0, "%.0f"));
  }
  out +=
      "comm_wait: finish_backward, waiting for the gradient collectives after backward; other: "
      "the step outside the phases; hidden: collective time inside backward / collective time; "
      "peak_MiB: rank 0's peak RSS during training (the trainer's closing line); cuda_MiB: on a "
      "GPU, rank 0's CUDA caching-allocator peak (torch.cuda.max_memory_allocated)\n";
  return out;
}

nlohmann::ordered_json RowsToJson(const std::vector<ScalingRow>& rows) {
  const auto optional = [](const std::optional<double>& v) {
    return v.has_value() ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
  };
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const ScalingRow& r : rows) {
    nlohmann::ordered_json row;
    row["processes"] = r.processes;
    row["traced_steps"] = r.steps;
    row["images_per_second"] = r.images_per_second;
    row["images_per_second_per_process"] = r.images_per_second_per_process;
    row["speedup"] = r.speedup;
    row["efficiency"] = r.efficiency;
    row["step_ms"] = r.step_ms;
    for (size_t p = 0; p < kPhases.size(); ++p) {
      row[absl::StrCat(kPhases[p], "_ms")] = r.phase_ms[p];
    }
    row["other_ms"] = r.other_ms;
    row["allreduce_ms"] = r.comm_ms;
    row["allreduce_inside_backward_ms"] = r.comm_inside_backward_ms;
    row["hidden_communication_share"] = optional(r.hidden_comm_share);
    row["peak_rss_mib_max"] = optional(r.peak_rss_mib_max);
    row["peak_rss_mib_rank0"] = optional(r.peak_rss_mib_rank0);
    row["peak_cuda_mib_rank0"] = optional(r.peak_cuda_mib_rank0);
    out.push_back(std::move(row));
  }
  return out;
}

namespace {

// The number before " MiB" after `label` in rank 0's closing line; the last such line wins.
std::optional<double> ParseRank0Peak(absl::string_view log, absl::string_view label) {
  std::optional<double> peak;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (!absl::ConsumePrefix(&line, "[rank 0]: trained ")) continue;
    const size_t at = line.find(label);
    if (at == absl::string_view::npos) continue;
    absl::string_view rest = line.substr(at + label.size());
    const size_t end = rest.find(" MiB");
    double value = 0;
    if (end != absl::string_view::npos && absl::SimpleAtod(rest.substr(0, end), &value)) {
      peak = value;
    }
  }
  return peak;
}

}  // namespace

std::optional<double> ParseRank0PeakRssMiB(absl::string_view log) {
  return ParseRank0Peak(log, "peak RSS ");
}

std::optional<double> ParseRank0PeakCudaMiB(absl::string_view log) {
  return ParseRank0Peak(log, "peak CUDA ");
}

}  // namespace vision::tools::scaling
