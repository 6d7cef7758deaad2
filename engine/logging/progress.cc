#include "engine/logging/progress.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace vision::engine::logging {
namespace {

// Fixed three decimals keep the line from jittering; values too small for them (late-training
// auxiliary terms) switch to scientific notation instead of printing as 0.000.
std::string FormatLoss(double value) {
  if (value != 0 && std::isfinite(value) && std::fabs(value) < 1e-3)
    return absl::StrFormat("%.2e", value);
  return absl::StrFormat("%.3f", value);
}

}  // namespace

StepTimeEstimator::StepTimeEstimator(int window)
    : window_(static_cast<size_t>(std::max(1, window))) {}

void StepTimeEstimator::AddStep(double seconds) {
  recent_.push_back(seconds);
  if (recent_.size() > window_) recent_.pop_front();
}

std::optional<double> StepTimeEstimator::StepSeconds() const {
  if (recent_.empty()) return std::nullopt;
  std::vector<double> sorted(recent_.begin(), recent_.end());
  const size_t mid = sorted.size() / 2;
  std::nth_element(sorted.begin(), sorted.begin() + mid, sorted.end());
  const double upper = sorted[mid];
  if (sorted.size() % 2 == 1) return upper;
  const double lower = *std::max_element(sorted.begin(), sorted.begin() + mid);
  return (lower + upper) / 2;
}

std::optional<double> StepTimeEstimator::EtaSeconds(int64_t remaining_steps) const {
  const std::optional<double> step = StepSeconds();
  if (!step.has_value()) return std::nullopt;
  return static_cast<double>(std::max<int64_t>(0, remaining_steps)) * *step;
}

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t total = static_cast<int64_t>(std::llround(seconds));
  return absl::StrFormat("%d:%02d:%02d", total / 3600, total / 60 % 60, total % 60);
}

std::string FormatProgressLine(const ProgressLine& line) {
  std::string out = absl::StrCat("step ", line.step);
  if (line.total_steps > 0) {
    absl::StrAppendFormat(
        &out, "/%d (%.1f%%)", line.total_steps,
        100.0 * static_cast<double>(line.step) / static_cast<double>(line.total_steps));
  }
  absl::StrAppend(&out, "  loss ", FormatLoss(line.loss));
  if (!line.loss_terms.empty()) {
    out += " (";
    for (size_t i = 0; i < line.loss_terms.size(); ++i) {
      absl::StrAppend(&out, i == 0 ? "" : " ", line.loss_terms[i].first, " ",
                      FormatLoss(line.loss_terms[i].second));
    }
    out += ")";
  }
  absl::StrAppendFormat(&out, "  lr %.1e  %.1f img/s  data %.0f%%", line.lr, line.images_per_second,
                        100.0 * line.data_wait_fraction);
  absl::StrAppend(&out, "  elapsed ", FormatDuration(line.elapsed_seconds), "  eta ",
                  line.eta_seconds.has_value() ? FormatDuration(*line.eta_seconds) : "?");
  if (line.skipped_samples > 0) {
    absl::StrAppend(&out, "  skipped ", line.skipped_samples, " bad sample",
                    line.skipped_samples == 1 ? "" : "s");
  }
  return out;
}

std::string FormatTrainingSummary(const TrainingSummary& summary) {
  std::string out =
      absl::StrFormat("trained %d steps in %s  %.1f img/s  peak RSS ", summary.steps,
                      FormatDuration(summary.total_seconds), summary.images_per_second);
  if (summary.peak_memory_mib.has_value()) {
    absl::StrAppendFormat(&out, "%.0f MiB", *summary.peak_memory_mib);
  } else {
    out += "?";
  }
  if (summary.peak_device_memory_mib.has_value()) {
    absl::StrAppendFormat(&out, "  peak CUDA %.0f MiB", *summary.peak_device_memory_mib);
  }
  if (!summary.best_metric_name.empty()) {
    absl::StrAppendFormat(&out, "  best %s %.4f at step %d", summary.best_metric_name,
                          summary.best_metric_value, summary.best_metric_step);
  }
  if (summary.skipped_samples > 0) {
    absl::StrAppend(&out, "  skipped ", summary.skipped_samples, " bad sample",
                    summary.skipped_samples == 1 ? "" : "s");
  }
  return out;
}

absl::StatusOr<double> ParseVmHwmMiB(absl::string_view proc_status) {
  for (absl::string_view line : absl::StrSplit(proc_status, '\n')) {
    if (!absl::ConsumePrefix(&line, "VmHWM:")) continue;
    // The kernel always reports this field in kB (KiB).
    line = absl::StripAsciiWhitespace(line);
    int64_t kib = 0;
    if (!absl::ConsumeSuffix(&line, "kB") ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kib)) {
      return absl::DataLossError(
          absl::StrCat("Unexpected VmHWM line in /proc status: '", std::string(line), "'"));
    }
    return static_cast<double>(kib) / 1024.0;
  }
  return absl::NotFoundError("No VmHWM line in /proc status (not a Linux process status file?)");
}

absl::StatusOr<double> PeakResidentMemoryMiB() {
  std::ifstream in("/proc/self/status");
  if (!in)
    return absl::UnavailableError("Cannot read /proc/self/status (peak memory is Linux-only)");
  std::stringstream text;
  text << in.rdbuf();
  return ParseVmHwmMiB(text.str());
}

}  // namespace vision::engine::logging
