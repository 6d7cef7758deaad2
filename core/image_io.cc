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
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <vector>

#include "absl/strings/escaping.h"
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

struct PixelLimit {
  int64_t pixels;
  absl::string_view setting;
};
thread_local PixelLimit pixel_limit = {kDefaultMaxImagePixels, "max_image_pixels"};

// "the image is 40000 x 40000 pixels (1600000000), more than the limit of ...".
std::string OverLimit(absl::string_view what, uint64_t width, uint64_t height,
                      absl::string_view extra = "") {
  return absl::StrCat("the ", what, " is ", width, " x ", height, " pixels (", width * height, ")",
                      extra, ", more than the limit of ", pixel_limit.pixels, " pixels (",
                      pixel_limit.setting, "); raise ", pixel_limit.setting,
                      " in the config if the file is meant to be this large");
}

absl::Status TooLarge(absl::string_view what, uint64_t width, uint64_t height) {
  if (width * height <= static_cast<uint64_t>(pixel_limit.pixels)) return absl::OkStatus();
  return absl::DataLossError(OverLimit(what, width, height));
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
  // The header chunk must come first (libpng refuses the file otherwise); PngPixelLimit reads it.
  if (size >= i + 8 && std::memcmp(data + i + 4, "IHDR", 4) != 0) {
    return Corrupt("PNG",
                   absl::StrCat("a chunk '",
                                absl::CHexEscape(absl::string_view(
                                    reinterpret_cast<const char*>(data + i + 4), 4)),
                                "' where the header chunk (IHDR) should be"),
                   i);
  }
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

// ---- The pixel limit of PNG, BMP, TIFF and WebP files, from their headers ----

uint32_t LittleEndian16(const unsigned char* p) { return (uint32_t{p[1]} << 8) | p[0]; }
uint32_t LittleEndian32(const unsigned char* p) {
  return (uint32_t{p[3]} << 24) | (uint32_t{p[2]} << 16) | (uint32_t{p[1]} << 8) | p[0];
}
// TIFF structures (a TIFF file's directories, an EXIF block's) in either byte order.
uint32_t ReadTiff16(const unsigned char* p, bool little_endian) {
  return little_endian ? LittleEndian16(p) : BigEndian16(p);
}
uint32_t ReadTiff32(const unsigned char* p, bool little_endian) {
  return little_endian ? LittleEndian32(p) : BigEndian32(p);
}

// After CheckPng: IHDR is the first chunk; a short one is left to libpng, which refuses it.
absl::Status PngPixelLimit(const unsigned char* data, size_t size, absl::string_view what) {
  if (size < 24) return absl::OkStatus();
  return TooLarge(what, BigEndian32(data + 16), BigEndian32(data + 20));
}

// OpenCV's BMP decoder reads a 32-bit width and height (the height negative for a top-down
// image) from a DIB header of 36 bytes or more, and 16-bit ones from a 12-byte (OS/2) header;
// it refuses every other header, and a file too short for its header.
absl::Status BmpPixelLimit(const unsigned char* data, size_t size, absl::string_view what) {
  if (size < 18) return absl::OkStatus();
  const uint32_t header = LittleEndian32(data + 14);
  if (header >= 36 && size >= 26) {
    const int64_t width = static_cast<int32_t>(LittleEndian32(data + 18));
    const int64_t height = static_cast<int32_t>(LittleEndian32(data + 22));
    return TooLarge(what, static_cast<uint64_t>(std::abs(width)),
                    static_cast<uint64_t>(std::abs(height)));
  }
  if (header == 12 && size >= 22) {
    return TooLarge(what, LittleEndian16(data + 18), LittleEndian16(data + 20));
  }
  return absl::OkStatus();
}

// The first image directory of a classic TIFF (what OpenCV decodes): its width and length, and
// the tile or strip size OpenCV's decoder allocates a buffer for (4 bytes per pixel for 8-bit
// images, whatever the image's size). libtiff refuses a directory that does not fit the file, a
// missing width or length, and a value of another type than an integer or out of 32 bits, and so
// does this check (where a tag occurs twice, the larger value counts).
absl::Status TiffPixelLimit(const unsigned char* data, size_t size, absl::string_view what) {
  const bool little = data[0] == 'I';
  const auto u16 = [&](size_t at) { return ReadTiff16(data + at, little); };
  const auto u32 = [&](size_t at) { return ReadTiff32(data + at, little); };
  const auto corrupt = [&](absl::string_view why, size_t at) { return Corrupt("TIFF", why, at); };
  if (size < 8) return Truncated("TIFF", size, "inside its header");
  const uint64_t ifd = u32(4);
  if (ifd + 2 > size) return corrupt("an image directory offset beyond the file's end", 4);
  const uint64_t entries = u16(ifd);
  if (ifd + 2 + 12 * entries > size) {
    return Truncated("TIFF", size, "inside the first image directory");
  }
  uint64_t width = 0, length = 0, tile_width = 0, tile_length = 0, rows_per_strip = 0;
  bool has_width = false, has_length = false;
  for (uint64_t e = 0; e < entries; ++e) {
    const size_t entry = ifd + 2 + 12 * e;
    const uint32_t tag = u16(entry);
    uint64_t* field = tag == 256   ? &width
                      : tag == 257 ? &length
                      : tag == 322 ? &tile_width
                      : tag == 323 ? &tile_length
                      : tag == 278 ? &rows_per_strip
                                   : nullptr;
    if (field == nullptr) continue;
    const uint32_t type = u16(entry + 2);
    const uint32_t count = u32(entry + 4);
    uint64_t value;
    if (count != 1) {
      return corrupt(absl::StrCat("tag ", tag, " with ", count, " values instead of one"), entry);
    }
    switch (type) {
      case 1:  // BYTE
      case 6:  // SBYTE
        value = data[entry + 8];
        if (type == 6 && value >= 0x80) value = ~uint64_t{0};
        break;
      case 3:  // SHORT
      case 8:  // SSHORT
        value = u16(entry + 8);
        if (type == 8 && value >= 0x8000) value = ~uint64_t{0};
        break;
      case 4:   // LONG
      case 9:   // SLONG
      case 13:  // IFD
        value = u32(entry + 8);
        if (type == 9 && value >= 0x80000000u) value = ~uint64_t{0};
        break;
      case 16:  // LONG8, SLONG8, IFD8: 8 bytes, stored at an offset in a classic TIFF
      case 17:
      case 18: {
        const uint64_t at = u32(entry + 8);
        if (at + 8 > size)
          return corrupt(absl::StrCat("tag ", tag, "'s value beyond the file's end"), entry);
        const uint64_t high = u32(little ? at + 4 : at), low = u32(little ? at : at + 4);
        value = high != 0 ? ~uint64_t{0} : low;
        break;
      }
      default:
        return corrupt(absl::StrCat("tag ", tag, " of type ", type, ", not an integer"), entry);
    }
    if (value > std::numeric_limits<uint32_t>::max()) {
      return corrupt(absl::StrCat("tag ", tag, " out of range"), entry);
    }
    *field = std::max(*field, value);
    has_width |= tag == 256;
    has_length |= tag == 257;
  }
  if (!has_width || !has_length) {
    return corrupt(
        absl::StrCat("an image directory without the image's ", has_width ? "length" : "width",
                     " (tag ", has_width ? 257 : 256, ")"),
        ifd);
  }
  if (absl::Status status = TooLarge(what, width, length); !status.ok()) return status;
  // OpenCV's buffer: a whole tile (tiled), or the width times the rows per strip (0 and the
  // maximum meaning the whole image).
  uint64_t buffer_width = width, buffer_rows = rows_per_strip;
  if (tile_width != 0 || tile_length != 0) {
    buffer_width = tile_width == 0 ? width : tile_width;
    buffer_rows = tile_length;
  }
  if (buffer_rows == 0 || buffer_rows == std::numeric_limits<uint32_t>::max()) buffer_rows = length;
  if (buffer_width * buffer_rows > static_cast<uint64_t>(pixel_limit.pixels)) {
    return absl::DataLossError(
        OverLimit(what, width, length,
                  absl::StrFormat(" and OpenCV would buffer %u x %u pixels of it at once (a %s)",
                                  buffer_width, buffer_rows,
                                  tile_width != 0 || tile_length != 0 ? "tile" : "strip")));
  }
  return absl::OkStatus();
}

// RIFF, WEBP, then the first chunk: a lossy frame (VP8: 14-bit width and height after a 3-byte
// frame tag and the 9D 01 2A start code), a lossless one (VP8L: a 0x2F signature, then 14 bits
// each of width - 1 and height - 1) or the extended header (VP8X: 24 bits each of the canvas's
// width - 1 and height - 1 after 4 bytes of flags), which libwebp requires to equal the
// frame's size for a still image. libwebp refuses a file that starts with any other chunk.
absl::Status WebPPixelLimit(const unsigned char* data, size_t size, absl::string_view what) {
  if (size < 20) return Truncated("WebP", size, "inside its first chunk's header");
  const absl::string_view chunk(reinterpret_cast<const char*>(data + 12), 4);
  const unsigned char* p = data + 20;
  const size_t payload = size - 20;
  const auto short_chunk = [&] {
    return Truncated("WebP", size, absl::StrCat("inside its '", chunk, "' chunk's header"));
  };
  if (chunk == "VP8 ") {
    if (payload < 10) return short_chunk();
    return TooLarge(what, LittleEndian16(p + 6) & 0x3FFF, LittleEndian16(p + 8) & 0x3FFF);
  }
  if (chunk == "VP8L") {
    if (payload < 5) return short_chunk();
    const uint32_t bits = LittleEndian32(p + 1);
    return TooLarge(what, (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1);
  }
  if (chunk == "VP8X") {
    if (payload < 10) return short_chunk();
    const uint32_t width = (uint32_t{p[6]} << 16 | uint32_t{p[5]} << 8 | p[4]) + 1;
    const uint32_t height = (uint32_t{p[9]} << 16 | uint32_t{p[8]} << 8 | p[7]) + 1;
    return TooLarge(what, width, height);
  }
  return Corrupt("WebP",
                 absl::StrCat("a chunk '", absl::CHexEscape(chunk),
                              "' where the image's first chunk (VP8, VP8L or VP8X) should be"),
                 12);
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
  kTooLarge,  // above the pixel limit (over_limit), or the output cannot be allocated
  kTooShort,  // more 8 x 8 blocks than the file has bits (err.message)
};

struct JpegDecode {
  jpeg_decompress_struct cinfo;
  JpegErrorManager err;
  cv::Mat image;
  bool needs_opencv = false;  // return cv::imdecode's image (see above)
  int64_t max_pixels = 0;     // the pixel limit, set by the caller
  // Above the limit: the image's size, and where a component's coefficient buffer is what is
  // too large, which one and its coefficients.
  bool over_limit = false;
  uint32_t width = 0, height = 0;
  int buffer_component = -1;
  uint64_t buffer_coefficients = 0;
};

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
  const uint64_t ifd = ReadTiff32(tiff + 4, little_endian);
  if (ifd + 2 > tiff_size) return false;
  const uint64_t entries = ReadTiff16(tiff + ifd, little_endian);
  if (ifd + 2 + 12 * entries > tiff_size) return false;
  int found = 0;
  bool one = false;
  for (uint64_t e = 0; e < entries; ++e) {
    const unsigned char* entry = tiff + ifd + 2 + 12 * e;
    if (ReadTiff16(entry, little_endian) != 0x0112) continue;
    ++found;
    one = ReadTiff16(entry + 2, little_endian) == 3 && ReadTiff16(entry + 8, little_endian) == 1;
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
// zero-initialised (cinfo and err) and have its max_pixels set. Only plain C data lives in this
// frame across the setjmp.
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
  // Huffman coding spends at least one bit on every 8 x 8 block (its DC code, in a sequential
  // scan and in a progressive file's first DC scan alike), so a header that claims more blocks
  // than the file has bits is damaged; refusing it here keeps a few hundred damaged bytes from
  // allocating and decoding a huge image. Arithmetic coding has no such bound: the QM coder's
  // adaptive probabilities let it code a run of all-zero blocks (a flat image, or one whose
  // detail sits in a few places) in a small fraction of a bit each, and when the scan's data
  // runs out libjpeg decodes zeros without a warning, so a legitimately flat arithmetic-coded
  // image and a 359-byte header claiming 2^30 pixels look alike. For arithmetic coding the
  // bound is the pixel limit below and nothing else.
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
  // The pixel limit, before jpeg_start_decompress allocates anything sized by the image. A
  // progressive or otherwise multi-scan file makes libjpeg buffer every component's DCT
  // coefficients for the whole image (jdcoefct.c: the component's blocks, padded to whole MCUs,
  // 64 coefficients of 2 bytes each); each component's buffer is counted as an image of that
  // many pixels, which it is for a full-resolution component of an image whose sides are
  // multiples of the MCU, and it bounds the buffer of a thin image padded to many times its
  // size. libjpeg refuses every component count but 1, 3 and 4 for the output colour spaces
  // asked for here before it allocates the buffer, so it is at most 4 x 2 bytes per pixel.
  d->over_limit =
      uint64_t{cinfo->image_width} * cinfo->image_height > static_cast<uint64_t>(d->max_pixels);
  if (!d->over_limit && jpeg_has_multiple_scans(cinfo)) {
    for (int c = 0; c < cinfo->num_components && !d->over_limit; ++c) {
      const jpeg_component_info& comp = cinfo->comp_info[c];
      const auto round_up = [](uint64_t n, uint64_t m) { return (n + m - 1) / m * m; };
      const uint64_t coefficients = 64 * round_up(comp.width_in_blocks, comp.h_samp_factor) *
                                    round_up(comp.height_in_blocks, comp.v_samp_factor);
      if (coefficients > static_cast<uint64_t>(d->max_pixels)) {
        d->over_limit = true;
        d->buffer_component = c;
        d->buffer_coefficients = coefficients;
      }
    }
  }
  if (d->over_limit) {
    d->width = cinfo->image_width;
    d->height = cinfo->image_height;
    jpeg_destroy_decompress(cinfo);
    return JpegOutcome::kTooLarge;
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
  d.max_pixels = pixel_limit.pixels;
  switch (RunJpegDecode(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), flags,
                        &d)) {
    case JpegOutcome::kDecoded:
      break;
    case JpegOutcome::kError:
      return absl::DataLossError(
          absl::StrCat("could not decode the ", what, ": libjpeg: ", d.err.message));
    case JpegOutcome::kTooLarge:
      if (!d.over_limit) {
        return absl::DataLossError(
            absl::StrCat("could not decode the ", what, ": ", d.err.message));
      }
      return absl::DataLossError(
          OverLimit(what, d.width, d.height,
                    d.buffer_component < 0
                        ? ""
                        : absl::StrFormat(
                              " and, as a progressive or multi-scan JPEG, needs libjpeg to buffer "
                              "%u DCT coefficients of its component %d at once",
                              d.buffer_coefficients, d.buffer_component)));
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

int64_t MaxImagePixels() { return pixel_limit.pixels; }

ScopedMaxImagePixels::ScopedMaxImagePixels(int64_t max_pixels, absl::string_view setting)
    : previous_pixels_(pixel_limit.pixels), previous_setting_(pixel_limit.setting) {
  pixel_limit = {std::clamp<int64_t>(max_pixels, 1, kLargestMaxImagePixels), setting};
}

ScopedMaxImagePixels::~ScopedMaxImagePixels() {
  pixel_limit = {previous_pixels_, previous_setting_};
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
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  absl::Status limit;
  if (format == "PNG") limit = PngPixelLimit(data, bytes.size(), what);
  if (format == "BMP") limit = BmpPixelLimit(data, bytes.size(), what);
  if (format == "TIFF") limit = TiffPixelLimit(data, bytes.size(), what);
  if (format == "WebP") limit = WebPPixelLimit(data, bytes.size(), what);
  if (!limit.ok()) return limit;
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
