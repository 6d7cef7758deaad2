#include "engine/logging/metrics_log.h"

#include <cerrno>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/logging/file_error.h"

namespace vision::engine::logging {
namespace {

bool IsReserved(const std::string& name) {
  return name == "step" || name == "epoch" || name == "time";
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsLog>> MetricsLog::Open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return FileError(ec.value(), absl::StrCat("Cannot create metrics directory '", dir, "'"));
  const std::string path = absl::StrCat(dir, "/metrics.jsonl");
  std::FILE* file = std::fopen(path.c_str(), "a+b");
  if (file == nullptr) {
    return FileError(errno, absl::StrCat("Cannot open metrics log '", path, "'"));
  }
  std::unique_ptr<MetricsLog> log(new MetricsLog(path, file));
  // A run killed mid-line leaves a partial last line; start on a fresh line so only that
  // partial line is unreadable, not the first line of this run too.
  bool ends_mid_line = false;
  if (std::fseek(file, 0, SEEK_END) == 0 && std::ftell(file) > 0 &&
      std::fseek(file, -1, SEEK_END) == 0) {
    ends_mid_line = std::fgetc(file) != '\n';
  }
  // stdio requires a seek between reading and writing an update stream.
  std::fseek(file, 0, SEEK_END);
  if (ends_mid_line && (std::fputc('\n', file) == EOF || std::fflush(file) != 0)) {
    return FileError(errno, absl::StrCat("Cannot write to metrics log '", path, "'"));
  }
  return log;
}

MetricsLog::~MetricsLog() { std::fclose(file_); }

absl::Status MetricsLog::Append(const MetricsRecord& record) {
  // Insertion order keeps step, epoch and time first on every line, for people reading it.
  nlohmann::ordered_json line;
  line["step"] = record.step;
  line["epoch"] = record.epoch;
  line["time"] =
      record.time != 0 ? record.time : absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  for (const auto& [name, value] : record.values) {
    if (IsReserved(name)) {
      return absl::InvalidArgumentError(absl::StrCat("Metrics log '", path_, "': value name '",
                                                     name, "' is reserved; rename it"));
    }
    line[name] = value;
  }
  for (const auto& [name, value] : record.strings) {
    if (IsReserved(name) || record.values.count(name) > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Metrics log '", path_, "': string name '", name,
                       "' is reserved or also a value name; rename it"));
    }
    line[name] = value;
  }
  // Strings from datasets may hold invalid UTF-8; replace it rather than throw.
  const std::string text =
      line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() || std::fflush(file_) != 0) {
    return FileError(errno, absl::StrCat("Cannot write to metrics log '", path_, "'"));
  }
  return absl::OkStatus();
}

}  // namespace vision::engine::logging
