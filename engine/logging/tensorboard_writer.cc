#include "engine/logging/tensorboard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/status_macros.h"
#include "engine/logging/crc32c.h"
#include "engine/logging/file_error.h"
#include "engine/logging/tensorboard.pb.h"

namespace vision::engine::logging {
namespace {

// Enough for two runs restarted within one second; more means something is looping.
constexpr int kMaxNameCollisions = 100;

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

double WallTime(absl::Time t) { return absl::ToDoubleSeconds(t - absl::UnixEpoch()); }

void AppendLittleEndian(uint64_t value, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

uint64_t LoadLittleEndian(const char* p, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i)
    value |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return value;
}

}  // namespace

std::string FrameTfRecord(absl::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  AppendLittleEndian(data.size(), 8, &out);
  AppendLittleEndian(MaskCrc32c(Crc32c(out)), 4, &out);
  out.append(data.data(), data.size());
  AppendLittleEndian(MaskCrc32c(Crc32c(data)), 4, &out);
  return out;
}

absl::StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Create(
    const std::string& log_dir) {
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  if (ec) {
    return FileError(ec.value(),
                     absl::StrCat("Cannot create TensorBoard log directory '", log_dir, "'"));
  }
  const absl::Time now = absl::Now();
  const std::string base =
      absl::StrCat(log_dir, "/events.out.tfevents.", absl::ToUnixSeconds(now), ".", HostName());
  std::string path;
  int fd = -1;
  int error = 0;
  for (int attempt = 0; attempt <= kMaxNameCollisions; ++attempt) {
    path = attempt == 0 ? base : absl::StrCat(base, ".", attempt);
    // O_EXCL: a second writer in the same second must not truncate the first one's file.
    fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    error = errno;
    if (fd >= 0 || error != EEXIST) break;
  }
  if (fd < 0) {
    return FileError(error, absl::StrCat("Cannot create TensorBoard event file '", path, "'"));
  }
  std::FILE* file = fdopen(fd, "wb");
  if (file == nullptr) {
    error = errno;
    close(fd);
    return FileError(error, absl::StrCat("Cannot open a stream on '", path, "'"));
  }
  std::unique_ptr<TensorBoardWriter> writer(new TensorBoardWriter(path, file));
  Event version;
  version.set_wall_time(WallTime(now));
  version.set_file_version("brain.Event:2");
  VISION_RETURN_IF_ERROR(writer->WriteEvent(version));
  // TensorBoard identifies a run by its first record; make it visible at once.
  VISION_RETURN_IF_ERROR(writer->Flush());
  return writer;
}

TensorBoardWriter::~TensorBoardWriter() { std::fclose(file_); }

absl::Status TensorBoardWriter::WriteEvent(const Event& event) {
  std::string payload;
  if (!event.SerializeToString(&payload)) {
    return absl::InternalError(
        absl::StrCat("Cannot serialize a TensorBoard event for '", path_, "'"));
  }
  const std::string record = FrameTfRecord(payload);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size()) {
    return FileError(errno, absl::StrCat("Cannot write to TensorBoard event file '", path_, "'"));
  }
  return absl::OkStatus();
}

absl::Status TensorBoardWriter::AddScalar(absl::string_view tag, float value, int64_t step) {
  if (tag.empty()) return absl::InvalidArgumentError("TensorBoard scalar tag must not be empty");
  Event event;
  event.set_wall_time(WallTime(absl::Now()));
  event.set_step(step);
  Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(std::string(tag));
  v->set_simple_value(value);
  return WriteEvent(event);
}

absl::Status TensorBoardWriter::AddImage(absl::string_view tag, const cv::Mat& image,
                                         int64_t step) {
  if (tag.empty()) return absl::InvalidArgumentError("TensorBoard image tag must not be empty");
  if (image.empty() || (image.type() != CV_8UC3 && image.type() != CV_8UC1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TensorBoard image '", std::string(tag), "': expected a non-empty 8-bit BGR (CV_8UC3) or ",
        "grayscale (CV_8UC1) image, got ", image.rows, "x", image.cols, " of type ", image.type()));
  }
  std::vector<unsigned char> png;
  try {
    // imencode takes OpenCV's BGR order and writes a standard RGB PNG.
    if (!cv::imencode(".png", image, png)) {
      return absl::InternalError(
          absl::StrCat("PNG encoding of TensorBoard image '", std::string(tag), "' failed"));
    }
  } catch (const cv::Exception& e) {
    return absl::InternalError(absl::StrCat("PNG encoding of TensorBoard image '", std::string(tag),
                                            "' failed: ", e.what()));
  }
  Event event;
  event.set_wall_time(WallTime(absl::Now()));
  event.set_step(step);
  Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(std::string(tag));
  Summary::Image* img = v->mutable_image();
  img->set_height(image.rows);
  img->set_width(image.cols);
  img->set_colorspace(image.channels() == 3 ? 3 : 1);
  img->set_encoded_image_string(png.data(), png.size());
  return WriteEvent(event);
}

absl::Status TensorBoardWriter::Flush() {
  if (std::fflush(file_) != 0) {
    return FileError(errno, absl::StrCat("Cannot flush TensorBoard event file '", path_, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ReadTfRecords(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return FileError(errno, absl::StrCat("Cannot open TFRecord file '", path, "'"));
  }
  std::string bytes;
  char chunk[1 << 16];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof(chunk), file)) > 0) bytes.append(chunk, n);
  const bool read_error = std::ferror(file) != 0;
  const int error = errno;
  std::fclose(file);
  if (read_error) {
    return FileError(error, absl::StrCat("Cannot read TFRecord file '", path, "'"));
  }

  std::vector<std::string> records;
  size_t offset = 0;
  while (offset < bytes.size()) {
    const auto corrupt = [&](absl::string_view what) {
      return absl::DataLossError(absl::StrCat("TFRecord file '", path, "': record ", records.size(),
                                              " at byte offset ", offset, ": ", std::string(what)));
    };
    const size_t left = bytes.size() - offset;
    if (left < 12) return corrupt(absl::StrCat("truncated header (", left, " of 12 bytes)"));
    const char* header = bytes.data() + offset;
    if (UnmaskCrc32c(static_cast<uint32_t>(LoadLittleEndian(header + 8, 4))) !=
        Crc32c(absl::string_view(header, 8))) {
      return corrupt("length CRC mismatch");
    }
    const uint64_t length = LoadLittleEndian(header, 8);
    if (length > left - 12 || left - 12 - length < 4) {
      return corrupt(absl::StrCat("truncated: needs ", length, " data bytes + 4 CRC bytes, only ",
                                  left - 12, " left"));
    }
    const absl::string_view data(header + 12, length);
    if (UnmaskCrc32c(static_cast<uint32_t>(LoadLittleEndian(header + 12 + length, 4))) !=
        Crc32c(data)) {
      return corrupt("data CRC mismatch");
    }
    records.emplace_back(data);
    offset += 12 + length + 4;
  }
  return records;
}

}  // namespace vision::engine::logging
