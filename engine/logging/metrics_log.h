// Training and evaluation metrics as JSON lines, one object per logged step, for scripts and
// plots that should not need TensorBoard.
#ifndef VISION_ENGINE_LOGGING_METRICS_LOG_H_
#define VISION_ENGINE_LOGGING_METRICS_LOG_H_

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace vision::engine::logging {

struct MetricsRecord {
  int64_t step = 0;
  int64_t epoch = 0;
  // Seconds since the Unix epoch; MetricsLog::Append fills in the current time when unset.
  double time = 0;
  // Written as JSON numbers; NaN and infinities (a diverged loss) have no JSON number and are
  // written as null.
  std::map<std::string, double> values;
  std::map<std::string, std::string> strings;
};

// Appends to `<dir>/metrics.jsonl`: {"step":..,"epoch":..,"time":.., <values>, <strings>} per
// line. Opened in append mode so a resumed run continues the same file (after a resume from an
// older checkpoint, steps may repeat; the later line is the one that counts). Every line is
// flushed when written, so a crash loses at most the line being written. Thread-compatible.
class MetricsLog {
 public:
  static absl::StatusOr<std::unique_ptr<MetricsLog>> Open(const std::string& dir);

  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  ~MetricsLog();

  // Fails if a value or string reuses the name "step", "epoch" or "time", or the same name
  // appears in both maps, since one of the two would silently be lost.
  absl::Status Append(const MetricsRecord& record);

  const std::string& path() const { return path_; }

 private:
  MetricsLog(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}

  std::string path_;
  std::FILE* file_;
};

}  // namespace vision::engine::logging

#endif  // VISION_ENGINE_LOGGING_METRICS_LOG_H_
