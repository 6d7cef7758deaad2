// Writes one TensorBoard event file through TensorBoardWriter from commands on stdin, so that a
// test in another language (tensorboard_reader_test.py) chooses the exact values and checks
// them with TensorBoard's own reader. Usage: write_tensorboard_events <log_dir> < commands;
// prints the event file's path. One command per line, fields separated by single spaces:
//   scalar <tag> <step> <float32 bit pattern, 8 hex digits>
//   image <tag> <step> <height> <width> <channels: 1 or 3> <pixels as hex, row-major, BGR>
// Values travel as bit patterns so that no decimal rounding stands between the two sides.
#include <cstdint>
#include <cstring>
#include <iostream>
#include <opencv2/core.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/logging/tensorboard_writer.h"

namespace vision::engine::logging {
namespace {

bool IsHex(absl::string_view s) {
  for (char c : s) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

absl::Status RunCommand(absl::string_view line, TensorBoardWriter& writer) {
  const std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
  const auto bad = [&] { return absl::InvalidArgumentError(absl::StrCat("Bad command: ", line)); };
  int64_t step = 0;
  if (f.size() < 3 || !absl::SimpleAtoi(f[2], &step)) return bad();
  if (f[0] == "scalar") {
    uint32_t bits = 0;
    if (f.size() != 4 || f[3].size() != 8 || !IsHex(f[3]) || !absl::SimpleHexAtoi(f[3], &bits)) {
      return bad();
    }
    float value;
    std::memcpy(&value, &bits, sizeof(value));
    return writer.AddScalar(f[1], value, step);
  }
  if (f[0] == "image") {
    int height = 0, width = 0, channels = 0;
    if (f.size() != 7 || !absl::SimpleAtoi(f[3], &height) || !absl::SimpleAtoi(f[4], &width) ||
        !absl::SimpleAtoi(f[5], &channels) || height <= 0 || width <= 0 ||
        (channels != 1 && channels != 3) || !IsHex(f[6]) ||
        f[6].size() != 2 * static_cast<size_t>(height) * width * channels) {
      return bad();
    }
    const std::string pixels = absl::HexStringToBytes(f[6]);
    cv::Mat image(height, width, channels == 3 ? CV_8UC3 : CV_8UC1);
    std::memcpy(image.data, pixels.data(), pixels.size());
    return writer.AddImage(f[1], image, step);
  }
  return bad();
}

int Main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "Usage: " << argv[0] << " <log_dir> < commands\n";
    return 2;
  }
  auto writer = TensorBoardWriter::Create(argv[1]);
  if (!writer.ok()) {
    std::cerr << writer.status() << "\n";
    return 1;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    if (absl::Status s = RunCommand(line, **writer); !s.ok()) {
      std::cerr << s << "\n";
      return 1;
    }
  }
  if (absl::Status s = (*writer)->Flush(); !s.ok()) {
    std::cerr << s << "\n";
    return 1;
  }
  std::cout << (*writer)->path() << "\n";
  return 0;
}

}  // namespace
}  // namespace vision::engine::logging

int main(int argc, char** argv) { return vision::engine::logging::Main(argc, argv); }
