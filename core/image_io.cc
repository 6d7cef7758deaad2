#include "core/image_io.h"

// jpeglib.h needs FILE and size_t declared before it.
#include <csetjmp>
#include <cstdio>
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

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

// ---- JPEG decoding with libjpeg-turbo, the library OpenCV's JPEG decoder uses ----
//
// OpenCV 4.6 (Debian 12) decodes a JPEG from memory as follows, and so does DecodeJpeg, so that
// its pixels are cv::imdecode's: default decompression parameters (islow DCT, fancy upsampling),
// output JCS_EXT_BGR for a colour result and JCS_GRAYSCALE for a grey one, one scanline at a
// time, then the EXIF orientation found in an APP1 segment (IMREAD_COLOR and IMREAD_GRAYSCALE
// only). Where OpenCV does more than that, DecodeJpeg decodes as a check only and returns
// cv::imdecode's image: 4-component (CMYK/YCCK) files, which OpenCV converts with its own
// routine; files whose EXIF orientation may be other than 1; files without Huffman tables (OpenCV
// loads the standard ones, as for Motion-JPEG frames); flags other than IMREAD_COLOR,
// IMREAD_GRAYSCALE and IMREAD_UNCHANGED.

// OpenCV's limit on decoded images (CV_IO_MAX_IMAGE_PIXELS); imdecode throws above it.
constexpr uint64_t kMaxImagePixels = uint64_t{1} << 30;

struct JpegErrorManager {
  jpeg_error_mgr pub;  // first, so that cinfo->err points to the whole struct
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];  // the fatal error's or the warning's
  bool warned;
};

// libjpeg's fatal errors: keep the message and return to the setjmp in RunJpegDecode. Nothing
// in the frames this jumps over (libjpeg's C code and this function) has a destructor.
void JpegErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings (level -1) are what libjpeg says about corrupt data it decodes around (and what it
// would print to stderr): the first one ends decoding like a fatal error, since the file is
// refused anyway (a damaged progressive file then skips its output pass). Trace messages (level
// >= 0) are dropped. Two warnings about metadata that does not touch the pixels are ignored: an
// unknown JFIF version and a bad ICC marker (only emitted when an ICC profile is read, which
// neither OpenCV nor this decoder does).
void JpegEmitMessage(j_common_ptr cinfo, int level) {
  if (level >= 0) return;
  const int code = cinfo->err->msg_code;
  if (code == JWRN_JFIF_MAJOR || code == JWRN_BOGUS_ICC) return;
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  err->warned = true;
  std::longjmp(err->jump, 1);
}

enum class JpegOutcome {
  kDecoded,
  kError,     // libjpeg's fatal error, in err.message
  kWarning,   // libjpeg's first warning, in err.message
  kTooLarge,  // above OpenCV's pixel limit, or the output cannot be allocated (err.message)
  kTooShort,  // more 8 x 8 blocks than the file has bits (err.message)
};

struct JpegDecode {
  jpeg_decompress_struct cinfo;
  JpegErrorManager err;
  cv::Mat image;
  bool needs_opencv = false;  // return cv::imdecode's image (see above)
};

uint32_t ReadExif16(const unsigned char* p, bool little_endian) {
  return little_endian ? (uint32_t{p[1]} << 8) | p[0] : BigEndian16(p);
}
uint32_t ReadExif32(const unsigned char* p, bool little_endian) {
  return little_endian
             ? (uint32_t{p[3]} << 24) | (uint32_t{p[2]} << 16) | (uint32_t{p[1]} << 8) | p[0]
             : BigEndian32(p);
}

// Whether an APP1 segment's data (after its length) certainly gives OpenCV orientation 1 (top
// left, nothing to do). OpenCV reads the TIFF header 6 bytes in ("Exif\0\0"), IFD0's entries,
// and the SHORT value of tag 0x0112. Conservative: a segment without the tag's two bytes in
// either byte order is fine; otherwise IFD0 must parse within the segment and hold exactly one
// orientation entry, of type SHORT, with value 1.
bool ExifOrientationIsOne(const unsigned char* data, size_t size) {
  bool has_tag_bytes = false;
  for (size_t i = 0; i + 1 < size && !has_tag_bytes; ++i) {
    has_tag_bytes =
        (data[i] == 0x01 && data[i + 1] == 0x12) || (data[i] == 0x12 && data[i + 1] == 0x01);
  }
  if (!has_tag_bytes) return true;
  if (size < 6 + 8) return false;
  const unsigned char* tiff = data + 6;
  const size_t tiff_size = size - 6;
  bool little_endian;
  if (tiff[0] == 'I' && tiff[1] == 'I') {
    little_endian = true;
  } else if (tiff[0] == 'M' && tiff[1] == 'M') {
    little_endian = false;
  } else {
    return false;
  }
  const uint64_t ifd = ReadExif32(tiff + 4, little_endian);
  if (ifd + 2 > tiff_size) return false;
  const uint64_t entries = ReadExif16(tiff + ifd, little_endian);
  if (ifd + 2 + 12 * entries > tiff_size) return false;
  int found = 0;
  bool one = false;
  for (uint64_t e = 0; e < entries; ++e) {
    const unsigned char* entry = tiff + ifd + 2 + 12 * e;
    if (ReadExif16(entry, little_endian) != 0x0112) continue;
    ++found;
    one = ReadExif16(entry + 2, little_endian) == 3 && ReadExif16(entry + 8, little_endian) == 1;
  }
  return found == 1 && one;
}

bool AllocateImage(cv::Mat* image, int rows, int cols, int type) noexcept {
  try {
    image->create(rows, cols, type);
    return true;
  } catch (...) {
    return false;
  }
}

// Decodes into d->image (where d->needs_opencv, only to see the warnings). `d` must be
// zero-initialised (cinfo and err). Only plain C data lives in this frame across the setjmp.
JpegOutcome RunJpegDecode(const unsigned char* data, size_t size, int flags, JpegDecode* d) {
  jpeg_decompress_struct* const cinfo = &d->cinfo;
  cinfo->err = jpeg_std_error(&d->err.pub);
  d->err.pub.error_exit = JpegErrorExit;
  d->err.pub.emit_message = JpegEmitMessage;
  if (setjmp(d->err.jump) != 0) {
    jpeg_destroy_decompress(cinfo);  // safe on a partly created decompressor
    return d->err.warned ? JpegOutcome::kWarning : JpegOutcome::kError;
  }
  jpeg_create_decompress(cinfo);
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
  jpeg_save_markers(cinfo, JPEG_APP0 + 1, 0xFFFF);
  jpeg_read_header(cinfo, TRUE);

  const bool known_flags =
      flags == cv::IMREAD_COLOR || flags == cv::IMREAD_GRAYSCALE || flags == cv::IMREAD_UNCHANGED;
  if (!known_flags) d->needs_opencv = true;
  const bool color =
      flags == cv::IMREAD_UNCHANGED ? cinfo->num_components > 1 : flags != cv::IMREAD_GRAYSCALE;
  int channels;
  if (cinfo->num_components == 4) {
    cinfo->out_color_space = JCS_CMYK;
    channels = 4;
    d->needs_opencv = true;
  } else if (color) {
    cinfo->out_color_space = JCS_EXT_BGR;
    channels = 3;
  } else {
    cinfo->out_color_space = JCS_GRAYSCALE;
    channels = 1;
  }
  if (cinfo->ac_huff_tbl_ptrs[0] == nullptr && cinfo->ac_huff_tbl_ptrs[1] == nullptr &&
      cinfo->dc_huff_tbl_ptrs[0] == nullptr && cinfo->dc_huff_tbl_ptrs[1] == nullptr) {
    d->needs_opencv = true;
  }
  if (flags != cv::IMREAD_UNCHANGED) {
    for (jpeg_saved_marker_ptr m = cinfo->marker_list; m != nullptr; m = m->next) {
      if (m->marker == JPEG_APP0 + 1 && !ExifOrientationIsOne(m->data, m->data_length)) {
        d->needs_opencv = true;
      }
    }
  }
  if (uint64_t{cinfo->image_width} * cinfo->image_height > kMaxImagePixels) {
    std::snprintf(d->err.message, sizeof(d->err.message),
                  "it is %u x %u pixels, more than OpenCV's limit of 2^30 pixels",
                  cinfo->image_width, cinfo->image_height);
    jpeg_destroy_decompress(cinfo);
    return JpegOutcome::kTooLarge;
  }
  // Huffman coding spends at least one bit on every 8 x 8 block (its DC code, in a sequential
  // scan and in a progressive file's first DC scan alike), so a header that claims more blocks
  // than the file has bits is damaged; refusing it here keeps a few hundred damaged bytes from
  // allocating and decoding up to 2^30 pixels. (Arithmetic coding has no such bound.)
  if (!cinfo->arith_code) {
    uint64_t blocks = 0;
    for (int c = 0; c < cinfo->num_components; ++c) {
      blocks +=
          uint64_t{cinfo->comp_info[c].width_in_blocks} * cinfo->comp_info[c].height_in_blocks;
    }
    if (blocks > 8 * uint64_t{size}) {
      std::snprintf(d->err.message, sizeof(d->err.message),
                    "its header says %u x %u pixels (%llu blocks of 8 x 8), more than its %zu "
                    "bytes can hold",
                    cinfo->image_width, cinfo->image_height,
                    static_cast<unsigned long long>(blocks), size);
      jpeg_destroy_decompress(cinfo);
      return JpegOutcome::kTooShort;
    }
  }
  jpeg_start_decompress(cinfo);
  if (cinfo->output_components != channels ||
      !AllocateImage(&d->image, static_cast<int>(cinfo->output_height),
                     static_cast<int>(cinfo->output_width), CV_8UC(channels))) {
    std::snprintf(d->err.message, sizeof(d->err.message), "cannot allocate %u x %u x %d pixels",
                  cinfo->output_width, cinfo->output_height, channels);
    jpeg_destroy_decompress(cinfo);
    return JpegOutcome::kTooLarge;
  }
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = d->image.ptr(static_cast<int>(cinfo->output_scanline));
    if (jpeg_read_scanlines(cinfo, &row, 1) != 1) break;  // cannot happen with a memory source
  }
  jpeg_finish_decompress(cinfo);
  jpeg_destroy_decompress(cinfo);
  return JpegOutcome::kDecoded;
}

// A JPEG that passed the structural check: a fatal libjpeg error or any warning is an error;
// otherwise `*image` is the decoded image, unless `*needs_opencv`, where the caller returns
// cv::imdecode's image instead.
absl::Status DecodeJpeg(absl::string_view bytes, int flags, absl::string_view what, cv::Mat* image,
                        bool* needs_opencv) {
  JpegDecode d;
  std::memset(&d.cinfo, 0, sizeof(d.cinfo));
  std::memset(&d.err, 0, sizeof(d.err));
  switch (RunJpegDecode(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), flags,
                        &d)) {
    case JpegOutcome::kDecoded:
      break;
    case JpegOutcome::kError:
      return absl::DataLossError(
          absl::StrCat("could not decode the ", what, ": libjpeg: ", d.err.message));
    case JpegOutcome::kTooLarge:
      return absl::DataLossError(absl::StrCat("could not decode the ", what, ": ", d.err.message));
    case JpegOutcome::kWarning:
      return absl::DataLossError(absl::StrCat("the JPEG file is corrupt: libjpeg: ", d.err.message,
                                              "; copy or download it again"));
    case JpegOutcome::kTooShort:
      return absl::DataLossError(
          absl::StrCat("the JPEG file is corrupt: ", d.err.message, "; copy or download it again"));
  }
  *needs_opencv = d.needs_opencv;
  if (!d.needs_opencv) *image = std::move(d.image);
  return absl::OkStatus();
}

// The structural check of `bytes`, whose format SniffImageFormat gave as `format`.
absl::Status CheckStructureOf(absl::string_view format, absl::string_view bytes) {
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  if (format == "JPEG") return CheckJpeg(data, bytes.size());
  if (format == "PNG") return CheckPng(data, bytes.size());
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckImageStructure(absl::string_view bytes) {
  return CheckStructureOf(SniffImageFormat(bytes), bytes);
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
  const absl::string_view format = SniffImageFormat(bytes);
  if (format.empty()) {
    std::string head;
    for (size_t i = 0; i < std::min<size_t>(bytes.size(), 8); ++i) {
      absl::StrAppendFormat(&head, "%s%02x", i == 0 ? "" : " ", static_cast<uint8_t>(bytes[i]));
    }
    return absl::DataLossError(absl::StrCat(
        "the ", what, " file is not a JPEG, PNG, BMP, TIFF or WebP file (it starts with bytes ",
        head, "); convert it to PNG or JPEG, or check that it is the file you meant"));
  }
  if (absl::Status status = CheckStructureOf(format, bytes); !status.ok()) return status;
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return absl::DataLossError(absl::StrCat("the ", what, " file is larger than 2 GiB"));
  }
  cv::Mat image;
  if (format == "JPEG") {
    bool needs_opencv = false;
    if (absl::Status status = DecodeJpeg(bytes, flags, what, &image, &needs_opencv); !status.ok()) {
      return status;
    }
    if (!needs_opencv) return image;
  }
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
