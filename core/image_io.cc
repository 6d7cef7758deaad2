#include "core/image_io.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace vision::core {
namespace {

constexpr char kPngSignature[] = "\x89PNG\r\n\x1a\n";
constexpr size_t kPngSignatureSize = 8;

absl::Status Truncated(absl::string_view format, size_t size, absl::string_view where) {
  return absl::DataLossError(absl::StrCat("the ", format, " file is truncated: its ", size,
                                          " bytes end ", where, "; copy or download it again"));
}

absl::Status Corrupt(absl::string_view format, absl::string_view what, size_t offset) {
  return absl::DataLossError(absl::StrCat("the ", format, " file is corrupt: ", what, " at byte ",
                                          offset, "; copy or download it again"));
}

uint32_t BigEndian16(const unsigned char* p) { return (uint32_t{p[0]} << 8) | p[1]; }
uint32_t BigEndian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// Markers without a length field: TEM, RST0..7, SOI, EOI.
bool IsStandalone(unsigned char marker) {
  return marker == 0x01 || (marker >= 0xD0 && marker <= 0xD9);
}

absl::Status CheckJpeg(const unsigned char* data, size_t size) {
  size_t i = 2;  // after SOI
  int scans = 0;
  while (true) {
    if (i >= size) {
      return Truncated("JPEG", size,
                       scans == 0 ? "before the first scan" : "before the end marker (EOI)");
    }
    if (data[i] != 0xFF) {
      return Corrupt("JPEG", absl::StrFormat("byte 0x%02X where a marker should start", data[i]),
                     i);
    }
    while (i < size && data[i] == 0xFF) ++i;  // fill bytes
    if (i >= size) return Truncated("JPEG", size, "inside a marker");
    const unsigned char marker = data[i++];
    if (marker == 0xD9) return absl::OkStatus();  // EOI; anything after it is ignored
    if (IsStandalone(marker)) continue;
    if (i + 2 > size) return Truncated("JPEG", size, "inside a segment's length");
    const uint32_t length = BigEndian16(data + i);
    if (length < 2) return Corrupt("JPEG", "a segment length below 2", i);
    if (i + length > size) {
      return Truncated("JPEG", size, absl::StrFormat("inside a segment (marker 0xFF%02X)", marker));
    }
    i += length;
    if (marker != 0xDA) continue;
    // SOS: compressed data up to the next marker that is neither a stuffed 0xFF00 nor a
    // restart marker; restart markers count 0..7 and around.
    ++scans;
    int next_restart = 0;
    while (true) {
      const void* found = std::memchr(data + i, 0xFF, size - i);
      if (found == nullptr) {
        return Truncated("JPEG", size, absl::StrCat("inside the compressed data of scan ", scans));
      }
      i = static_cast<const unsigned char*>(found) - data;
      size_t j = i + 1;
      while (j < size && data[j] == 0xFF) ++j;
      if (j >= size) {
        return Truncated("JPEG", size, absl::StrCat("inside the compressed data of scan ", scans));
      }
      const unsigned char next = data[j];
      if (next == 0x00) {
        i = j + 1;
      } else if (next >= 0xD0 && next <= 0xD7) {
        if (next - 0xD0 != next_restart) {
          return Corrupt(
              "JPEG",
              absl::StrFormat("restart marker %d where %d was due", next - 0xD0, next_restart), i);
        }
        next_restart = (next_restart + 1) % 8;
        i = j + 1;
      } else {
        break;  // the next segment's marker, at i
      }
    }
  }
}

absl::Status CheckPng(const unsigned char* data, size_t size) {
  size_t i = kPngSignatureSize;
  while (true) {
    if (i + 8 > size) return Truncated("PNG", size, "before the end chunk (IEND)");
    const uint32_t length = BigEndian32(data + i);
    const std::string type(reinterpret_cast<const char*>(data + i + 4), 4);
    if (length > size || i + 12 + length > size) {
      return Truncated("PNG", size, absl::StrCat("inside a '", type, "' chunk"));
    }
    if (type == "IEND") return absl::OkStatus();
    i += 12 + length;
  }
}

}  // namespace

absl::Status CheckImageStructure(absl::string_view bytes) {
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  const absl::string_view format = SniffImageFormat(bytes);
  if (format == "JPEG") return CheckJpeg(data, bytes.size());
  if (format == "PNG") return CheckPng(data, bytes.size());
  return absl::OkStatus();
}

absl::string_view SniffImageFormat(absl::string_view bytes) {
  const auto starts = [&](absl::string_view magic, size_t offset = 0) {
    return bytes.size() >= offset + magic.size() && bytes.substr(offset, magic.size()) == magic;
  };
  if (starts(absl::string_view("\xFF\xD8\xFF", 3))) return "JPEG";
  if (starts(absl::string_view(kPngSignature, kPngSignatureSize))) return "PNG";
  if (starts("BM")) return "BMP";
  if (starts(absl::string_view("II*\0", 4)) || starts(absl::string_view("MM\0*", 4))) return "TIFF";
  if (starts("RIFF") && starts("WEBP", 8)) return "WebP";
  return {};
}

absl::StatusOr<cv::Mat> DecodeImage(absl::string_view bytes, int flags, absl::string_view what) {
  if (bytes.empty()) return absl::DataLossError(absl::StrCat("the ", what, " file is empty"));
  if (SniffImageFormat(bytes).empty()) {
    std::string head;
    for (size_t i = 0; i < std::min<size_t>(bytes.size(), 8); ++i) {
      absl::StrAppendFormat(&head, "%s%02x", i == 0 ? "" : " ", static_cast<uint8_t>(bytes[i]));
    }
    return absl::DataLossError(absl::StrCat(
        "the ", what, " file is not a JPEG, PNG, BMP, TIFF or WebP file (it starts with bytes ",
        head, "); convert it to PNG or JPEG, or check that it is the file you meant"));
  }
  if (absl::Status status = CheckImageStructure(bytes); !status.ok()) return status;
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return absl::DataLossError(absl::StrCat("the ", what, " file is larger than 2 GiB"));
  }
  cv::Mat image;
  try {
    image = cv::imdecode(
        cv::Mat(1, static_cast<int>(bytes.size()), CV_8U, const_cast<char*>(bytes.data())), flags);
  } catch (const cv::Exception& e) {
    return absl::DataLossError(absl::StrCat("could not decode the ", what, ": ", e.what()));
  }
  if (image.empty()) {
    return absl::DataLossError(
        absl::StrCat("could not decode the ", what, " (not an image, or a damaged one)"));
  }
  return image;
}

absl::StatusOr<cv::Mat> ReadImage(const std::string& path, int flags, absl::string_view what) {
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file) return absl::NotFoundError(absl::StrCat(path, ": cannot open the ", what, " file"));
  const std::streamoff size = file.tellg();
  if (size <= 0) return absl::DataLossError(absl::StrCat(path, ": the ", what, " file is empty"));
  std::vector<char> bytes(static_cast<size_t>(size));
  file.seekg(0);
  if (!file.read(bytes.data(), size)) {
    return absl::DataLossError(absl::StrCat(path, ": read error"));
  }
  absl::StatusOr<cv::Mat> image =
      DecodeImage(absl::string_view(bytes.data(), bytes.size()), flags, what);
  if (!image.ok()) {
    return absl::Status(image.status().code(), absl::StrCat(path, ": ", image.status().message()));
  }
  return image;
}

}  // namespace vision::core
