// Writes TensorBoard event files (scalars and images) without TensorFlow, and reads back the
// TFRecord framing they use, checking every CRC.
#ifndef VISION_ENGINE_LOGGING_TENSORBOARD_WRITER_H_
#define VISION_ENGINE_LOGGING_TENSORBOARD_WRITER_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cv {
class Mat;
}  // namespace cv

namespace vision::engine::logging {

class Event;

// One writer per process that logs (rank 0). Thread-compatible: calls on one writer must not
// overlap. Records are buffered by stdio; Flush() makes them visible to a running TensorBoard.
class TensorBoardWriter {
 public:
  // Creates `log_dir` (and its parents) if needed and opens
  // `<log_dir>/events.out.tfevents.<unix_seconds>.<hostname>`, never overwriting an existing
  // file (a run restarted within the same second gets a ".1", ".2", ... suffix instead).
  // Writes the file_version record TensorBoard expects first.
  static absl::StatusOr<std::unique_ptr<TensorBoardWriter>> Create(const std::string& log_dir);

  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;
  // Flushes and closes; a failure here cannot be reported, so call Flush() first if it matters.
  ~TensorBoardWriter();

  absl::Status AddScalar(absl::string_view tag, float value, int64_t step);

  // `image` is 8-bit BGR (CV_8UC3, as OpenCV loads it) or grayscale (CV_8UC1); it is stored
  // PNG-encoded, RGB or grayscale, at its own size.
  absl::Status AddImage(absl::string_view tag, const cv::Mat& image, int64_t step);

  absl::Status Flush();

  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}

  absl::Status WriteEvent(const Event& event);

  std::string path_;
  std::FILE* file_;
};

// The payloads of every record of a TFRecord file, in order. Fails with DataLoss naming the
// byte offset of the first record whose length or data CRC does not match or that is cut short.
absl::StatusOr<std::vector<std::string>> ReadTfRecords(const std::string& path);

// One record's framing: little-endian uint64 length, masked CRC-32C of those 8 bytes, the
// data, masked CRC-32C of the data.
std::string FrameTfRecord(absl::string_view data);

}  // namespace vision::engine::logging

#endif  // VISION_ENGINE_LOGGING_TENSORBOARD_WRITER_H_
