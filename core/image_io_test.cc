#include "core/image_io.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <string>
#include <vector>

// clang-format off
#include <jpeglib.h>  // after <cstdio>
// clang-format on

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::core {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

// A 96 x 64 picture with detail in every block, so each scan has real compressed data.
cv::Mat Picture() {
  cv::Mat image(64, 96, CV_8UC3);
  cv::randu(image, 0, 255);
  return image;
}

std::vector<uchar> Encode(const std::string& extension, const std::vector<int>& params = {}) {
  std::vector<uchar> bytes;
  EXPECT_TRUE(cv::imencode(extension, Picture(), bytes, params));
  return bytes;
}

// A JPEG written by libjpeg directly, for what cv::imencode cannot write: chroma sampling other
// than 4:2:0 (luma sampling factors h x v), CMYK files (`image` 4 channels, JCS_CMYK) and
// arithmetic coding.
std::vector<uchar> EncodeWithLibjpeg(const cv::Mat& image, J_COLOR_SPACE in_color_space, int h,
                                     int v, bool arithmetic = false, bool progressive = false) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);  // errors exit the test: there are none for these inputs
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = image.cols;
  cinfo.image_height = image.rows;
  cinfo.input_components = image.channels();
  cinfo.in_color_space = in_color_space;
  jpeg_set_defaults(&cinfo);
  cinfo.comp_info[0].h_samp_factor = h;
  cinfo.comp_info[0].v_samp_factor = v;
  cinfo.arith_code = arithmetic ? TRUE : FALSE;
  if (progressive) jpeg_simple_progression(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uchar*>(image.ptr(static_cast<int>(cinfo.next_scanline)));
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::vector<uchar> bytes(buffer, buffer + size);
  std::free(buffer);
  return bytes;
}

std::string Write(const std::string& name, const std::vector<uchar>& bytes) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  return path;
}

std::vector<uchar> Prefix(const std::vector<uchar>& bytes, size_t size) {
  return std::vector<uchar>(bytes.begin(), bytes.begin() + size);
}

absl::Status Check(const std::vector<uchar>& bytes) {
  return CheckImageStructure(
      absl::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

TEST(ImageIoTest, CompleteFilesDecodeAsImreadDoes) {
  const std::vector<std::pair<std::string, std::vector<uchar>>> files = {
      {"baseline.jpg", Encode(".jpg")},
      {"progressive.jpg", Encode(".jpg", {cv::IMWRITE_JPEG_PROGRESSIVE, 1})},
      {"restarts.jpg", Encode(".jpg", {cv::IMWRITE_JPEG_RST_INTERVAL, 2})},
      {"image.png", Encode(".png")},
  };
  for (const auto& [name, bytes] : files) {
    const std::string path = Write(name, bytes);
    absl::StatusOr<cv::Mat> image = ReadImage(path);
    ASSERT_TRUE(image.ok()) << name << ": " << image.status();
    const cv::Mat expected = cv::imread(path, cv::IMREAD_COLOR);
    EXPECT_EQ(cv::norm(*image, expected, cv::NORM_INF), 0) << name;
  }
  // Bytes after the JPEG's end marker are ignored, as libjpeg ignores them.
  std::vector<uchar> padded = Encode(".jpg");
  padded.insert(padded.end(), {0, 0, 0x12, 0xFF});
  EXPECT_TRUE(ReadImage(Write("padded.jpg", padded)).ok());
}

TEST(ImageIoTest, TruncatedJpegsAreErrorsWhereOpenCvDecodesThemAsGrey) {
  for (const std::vector<uchar>& bytes :
       {Encode(".jpg"), Encode(".jpg", {cv::IMWRITE_JPEG_PROGRESSIVE, 1}),
        Encode(".jpg", {cv::IMWRITE_JPEG_RST_INTERVAL, 2})}) {
    // Cut in the middle of the (last) scan: OpenCV fills in the rest and reports nothing.
    const std::string path = Write("cut.jpg", Prefix(bytes, bytes.size() * 3 / 4));
    EXPECT_FALSE(cv::imread(path, cv::IMREAD_COLOR).empty());
    const absl::Status status = ReadImage(path).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(status.message(), AllOf(HasSubstr(path + ": the JPEG file is truncated"),
                                        HasSubstr("inside the compressed data of scan")));
    // Every shorter prefix is an error too: the end marker is the file's last two bytes.
    for (size_t size = 3; size < bytes.size(); size += 7) {
      EXPECT_EQ(Check(Prefix(bytes, size)).code(), absl::StatusCode::kDataLoss) << size;
    }
    EXPECT_EQ(Check(Prefix(bytes, bytes.size() - 1)).code(), absl::StatusCode::kDataLoss);
    EXPECT_TRUE(Check(bytes).ok());
  }
}

TEST(ImageIoTest, CorruptJpegStructureIsAnError) {
  std::vector<uchar> bytes = Encode(".jpg", {cv::IMWRITE_JPEG_RST_INTERVAL, 2});
  // Swap the first two restart markers' numbers: RST1 where RST0 is due.
  std::vector<size_t> restarts;
  for (size_t i = 0; i + 1 < bytes.size(); ++i) {
    if (bytes[i] == 0xFF && bytes[i + 1] >= 0xD0 && bytes[i + 1] <= 0xD7) restarts.push_back(i);
  }
  ASSERT_GE(restarts.size(), 2u);
  std::vector<uchar> swapped = bytes;
  swapped[restarts[0] + 1] = 0xD1;
  EXPECT_THAT(Check(swapped).message(), HasSubstr("restart marker 1 where 0 was due"));
  // Garbage between the first two segments: libjpeg's "extraneous bytes before marker".
  std::vector<uchar> garbage = bytes;
  ASSERT_EQ(garbage[2], 0xFF);
  const size_t second_segment = 4 + (size_t{garbage[4]} << 8 | garbage[5]);
  ASSERT_EQ(garbage[second_segment], 0xFF);
  garbage.insert(garbage.begin() + second_segment, {0x12, 0x34});
  EXPECT_THAT(Check(garbage).message(), HasSubstr("byte 0x12 where a marker should start"));
}

// The offset of the first scan's compressed data (after the SOS segment).
size_t FirstScanData(const std::vector<uchar>& bytes) {
  for (size_t i = 2; i + 3 < bytes.size();) {
    EXPECT_EQ(bytes[i], 0xFF);
    const size_t length = size_t{bytes[i + 2]} << 8 | bytes[i + 3];
    if (bytes[i + 1] == 0xDA) return i + 2 + length;
    i += 2 + length;
  }
  ADD_FAILURE() << "no scan";
  return 0;
}

// A flipped run of bits inside complete compressed data: the container is intact, OpenCV
// decodes a partly grey image and libjpeg only warns, which is now an error naming the file.
TEST(ImageIoTest, CorruptCompressedDataIsAnErrorQuotingLibjpeg) {
  for (const std::vector<int>& params :
       {std::vector<int>{}, std::vector<int>{cv::IMWRITE_JPEG_RST_INTERVAL, 2}}) {
    std::vector<uchar> bytes = Encode(".jpg", params);
    // 7F FF00 FF00 FF00 FE is 38 one bits in a row (FF00 is a stuffed 0xFF): longer than any
    // Huffman code plus its extra bits, and no JPEG code is all ones, so it is a bad code
    // wherever the decoder stands. Placed mid-scan, after a byte that is not 0xFF (so no marker
    // is formed); the structural check still passes.
    const std::vector<uchar> run = {0x7F, 0xFF, 0x00, 0xFF, 0x00, 0xFF, 0x00, 0xFE};
    size_t at = FirstScanData(bytes) + 200;
    while (bytes[at - 1] == 0xFF) ++at;
    ASSERT_LT(at + run.size() + 2, bytes.size());
    std::copy(run.begin(), run.end(), bytes.begin() + at);
    ASSERT_TRUE(Check(bytes).ok()) << Check(bytes);
    const std::string path = Write("flipped.jpg", bytes);
    EXPECT_FALSE(cv::imread(path, cv::IMREAD_COLOR).empty());  // OpenCV: a warning on stderr
    for (const int flags : {cv::IMREAD_COLOR, cv::IMREAD_GRAYSCALE, cv::IMREAD_UNCHANGED}) {
      const absl::Status status = ReadImage(path, flags).status();
      EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << flags;
      // Which warning comes first depends on where the decoder loses sync (libjpeg-turbo's fast
      // Huffman path skips ahead to the next marker without a bad-code warning).
      EXPECT_THAT(
          status.message(),
          AllOf(HasSubstr(path + ": the JPEG file is corrupt: libjpeg: Corrupt JPEG data: "),
                AnyOf(HasSubstr("bad Huffman code"),
                      HasSubstr("extraneous bytes before marker 0xd9")),
                HasSubstr("; copy or download it again")))
          << flags;
    }
  }
}

// Good JPEGs of every kind decode exactly as cv::imdecode decodes them, for every flag the
// datasets use (images: IMREAD_COLOR; label maps: IMREAD_UNCHANGED).
TEST(ImageIoTest, JpegsDecodeExactlyAsImdecodeDoes) {
  cv::Mat grey;
  cv::cvtColor(Picture(), grey, cv::COLOR_BGR2GRAY);
  std::vector<uchar> grey_bytes;
  ASSERT_TRUE(cv::imencode(".jpg", grey, grey_bytes));
  cv::Mat cmyk(64, 96, CV_8UC4);
  cv::randu(cmyk, 0, 255);
  const std::vector<std::pair<std::string, std::vector<uchar>>> files = {
      {"baseline", Encode(".jpg")},
      {"quality 100", Encode(".jpg", {cv::IMWRITE_JPEG_QUALITY, 100})},
      {"progressive", Encode(".jpg", {cv::IMWRITE_JPEG_PROGRESSIVE, 1})},
      {"restarts", Encode(".jpg", {cv::IMWRITE_JPEG_RST_INTERVAL, 2})},
      {"4:4:4", EncodeWithLibjpeg(Picture(), JCS_EXT_BGR, 1, 1)},
      {"4:2:2", EncodeWithLibjpeg(Picture(), JCS_EXT_BGR, 2, 1)},
      {"CMYK", EncodeWithLibjpeg(cmyk, JCS_CMYK, 1, 1)},
      {"greyscale", grey_bytes},
      {"arithmetic", EncodeWithLibjpeg(Picture(), JCS_EXT_BGR, 2, 2, /*arithmetic=*/true)},
      {"arithmetic progressive",
       EncodeWithLibjpeg(Picture(), JCS_EXT_BGR, 2, 2, /*arithmetic=*/true, /*progressive=*/true)},
      {"arithmetic CMYK", EncodeWithLibjpeg(cmyk, JCS_CMYK, 1, 1, /*arithmetic=*/true)},
  };
  for (const auto& [name, bytes] : files) {
    for (const int flags : {cv::IMREAD_COLOR, cv::IMREAD_GRAYSCALE, cv::IMREAD_UNCHANGED}) {
      const absl::string_view view(reinterpret_cast<const char*>(bytes.data()), bytes.size());
      absl::StatusOr<cv::Mat> image = DecodeImage(view, flags);
      ASSERT_TRUE(image.ok()) << name << ", flags " << flags << ": " << image.status();
      const cv::Mat expected = cv::imdecode(bytes, flags);
      ASSERT_EQ(image->type(), expected.type()) << name << ", flags " << flags;
      ASSERT_EQ(image->size(), expected.size()) << name << ", flags " << flags;
      EXPECT_EQ(cv::norm(*image, expected, cv::NORM_INF), 0) << name << ", flags " << flags;
    }
  }
}

// An APP1 EXIF segment (little-endian TIFF) with one IFD0 entry: orientation `orientation`.
std::vector<uchar> WithExifOrientation(const std::vector<uchar>& jpeg, int orientation) {
  const std::vector<uchar> tiff = {'I',
                                   'I',
                                   0x2A,
                                   0,
                                   8,
                                   0,
                                   0,
                                   0,  // header, IFD0 at 8
                                   1,
                                   0,  // one entry
                                   0x12,
                                   0x01,
                                   3,
                                   0,
                                   1,
                                   0,
                                   0,
                                   0,  // orientation, SHORT, 1
                                   static_cast<uchar>(orientation),
                                   0,
                                   0,
                                   0,
                                   0,
                                   0,
                                   0,
                                   0};  // no next IFD
  std::vector<uchar> segment = {0xFF, 0xE1, 0, 0, 'E', 'x', 'i', 'f', 0, 0};
  segment.insert(segment.end(), tiff.begin(), tiff.end());
  segment[3] = static_cast<uchar>(segment.size() - 2);
  std::vector<uchar> out = segment;
  out.insert(out.begin(), jpeg.begin(), jpeg.begin() + 2);  // SOI first
  out.insert(out.end(), jpeg.begin() + 2, jpeg.end());
  return out;
}

TEST(ImageIoTest, JpegExifOrientationIsAppliedAsImdecodeDoes) {
  const std::vector<uchar> plain = Encode(".jpg");
  for (int orientation = 1; orientation <= 8; ++orientation) {
    const std::vector<uchar> bytes = WithExifOrientation(plain, orientation);
    for (const int flags : {cv::IMREAD_COLOR, cv::IMREAD_GRAYSCALE, cv::IMREAD_UNCHANGED}) {
      const absl::string_view view(reinterpret_cast<const char*>(bytes.data()), bytes.size());
      absl::StatusOr<cv::Mat> image = DecodeImage(view, flags);
      ASSERT_TRUE(image.ok()) << orientation << ": " << image.status();
      const cv::Mat expected = cv::imdecode(bytes, flags);
      ASSERT_EQ(image->size(), expected.size()) << orientation << ", flags " << flags;
      EXPECT_EQ(cv::norm(*image, expected, cv::NORM_INF), 0) << orientation << ", flags " << flags;
    }
  }
  // Orientation 6 (rotate 90 degrees clockwise) does turn the 96 x 64 picture.
  const std::vector<uchar> rotated = WithExifOrientation(plain, 6);
  EXPECT_EQ(
      DecodeImage(absl::string_view(reinterpret_cast<const char*>(rotated.data()), rotated.size()))
          ->size(),
      cv::Size(64, 96));
}

// Sets the frame header's (any SOFn) height and width.
std::vector<uchar> WithFrameSize(std::vector<uchar> bytes, int width, int height) {
  for (size_t i = 2; i + 8 < bytes.size();) {
    const uchar marker = bytes[i + 1];
    if (marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC) {
      bytes[i + 5] = static_cast<uchar>(height >> 8);
      bytes[i + 6] = static_cast<uchar>(height & 0xFF);
      bytes[i + 7] = static_cast<uchar>(width >> 8);
      bytes[i + 8] = static_cast<uchar>(width & 0xFF);
      return bytes;
    }
    i += 2 + (size_t{bytes[i + 2]} << 8 | bytes[i + 3]);
  }
  ADD_FAILURE() << "no frame header";
  return bytes;
}

// A header with huge dimensions over a few KB of data: refused before anything is allocated
// (fuzzing found a 453-byte progressive file claiming 17732 x 17492 pixels that took seconds and
// a GB to decode: testdata/fuzz/image_decode/regression_progressive_*_timeout.jpg).
TEST(ImageIoTest, JpegDimensionsBeyondItsDataAreAnError) {
  const std::vector<uchar> tall = WithFrameSize(Encode(".jpg"), 30000, 30000);
  const absl::Status status =
      DecodeImage(absl::string_view(reinterpret_cast<const char*>(tall.data()), tall.size()))
          .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(),
              HasSubstr("the JPEG file is corrupt: its header says 30000 x 30000 pixels (21093750 "
                        "blocks of 8 x 8), more than its " +
                        std::to_string(tall.size()) + " bytes can hold"));
  // The bound by the file's bits comes before the pixel limit: such a file is damaged, not large.
  const std::vector<uchar> huge = WithFrameSize(Encode(".jpg"), 65000, 65000);
  EXPECT_THAT(
      DecodeImage(absl::string_view(reinterpret_cast<const char*>(huge.data()), huge.size()))
          .status()
          .message(),
      HasSubstr("the JPEG file is corrupt: its header says 65000 x 65000 pixels"));
}

absl::StatusOr<cv::Mat> Decode(const std::vector<uchar>& bytes, int flags = cv::IMREAD_COLOR) {
  return DecodeImage(absl::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                     flags);
}

// What the pixel limit's message says for a w x h image (a limit set as "test.max_image_pixels").
std::string OverLimit(int width, int height, int64_t limit, const std::string& what = "image") {
  return absl::StrCat("the ", what, " is ", width, " x ", height, " pixels (",
                      int64_t{width} * height, "), more than the limit of ", limit,
                      " pixels (test.max_image_pixels); raise test.max_image_pixels in the config "
                      "if the file is meant to be this large");
}

TEST(ImageIoTest, ThePixelLimitIsTheDefaultUnlessAScopeSetsIt) {
  EXPECT_EQ(MaxImagePixels(), kDefaultMaxImagePixels);
  {
    const ScopedMaxImagePixels outer(1000, "outer");
    EXPECT_EQ(MaxImagePixels(), 1000);
    {
      const ScopedMaxImagePixels inner(int64_t{1} << 40, "inner");
      EXPECT_EQ(MaxImagePixels(), kLargestMaxImagePixels);  // OpenCV's, the ceiling
    }
    EXPECT_EQ(MaxImagePixels(), 1000);
  }
  EXPECT_EQ(MaxImagePixels(), kDefaultMaxImagePixels);
}

// Every accepted format: an image of exactly the limit decodes, one pixel more is refused from
// its header with a message naming the setting, as a bad sample (DataLoss) naming the file.
TEST(ImageIoTest, ImagesAboveThePixelLimitAreRefusedInEveryFormat) {
  cv::Mat cmyk(64, 96, CV_8UC4);
  cv::randu(cmyk, 0, 255);
  std::vector<std::pair<std::string, std::vector<uchar>>> files = {
      {"baseline.jpg", Encode(".jpg")},
      {"progressive.jpg", Encode(".jpg", {cv::IMWRITE_JPEG_PROGRESSIVE, 1})},
      {"arithmetic.jpg", EncodeWithLibjpeg(Picture(), JCS_EXT_BGR, 2, 2, /*arithmetic=*/true)},
      {"arithmetic_progressive.jpg",
       EncodeWithLibjpeg(Picture(), JCS_EXT_BGR, 2, 2, /*arithmetic=*/true, /*progressive=*/true)},
      {"cmyk_progressive.jpg",
       EncodeWithLibjpeg(cmyk, JCS_CMYK, 1, 1, /*arithmetic=*/false, /*progressive=*/true)},
      {"image.png", Encode(".png")},
      {"image.bmp", Encode(".bmp")},
      {"image.tiff", Encode(".tiff")},
      {"image.webp", Encode(".webp", {cv::IMWRITE_WEBP_QUALITY, 101})},
      {"lossy.webp", Encode(".webp", {cv::IMWRITE_WEBP_QUALITY, 80})},
  };
  constexpr int64_t kPixels = 96 * 64;
  for (const auto& [name, bytes] : files) {
    const std::string path = Write(name, bytes);
    for (const int flags : {cv::IMREAD_COLOR, cv::IMREAD_UNCHANGED}) {
      {
        const ScopedMaxImagePixels limit(kPixels, "test.max_image_pixels");
        absl::StatusOr<cv::Mat> image = ReadImage(path, flags);
        ASSERT_TRUE(image.ok()) << name << ": " << image.status();
        EXPECT_EQ(image->size(), cv::Size(96, 64)) << name;
      }
      const ScopedMaxImagePixels limit(kPixels - 1, "test.max_image_pixels");
      const absl::Status status = ReadImage(path, flags, "label map").status();
      EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << name;
      EXPECT_EQ(status.message(), path + ": " + OverLimit(96, 64, kPixels - 1, "label map"))
          << name;
    }
  }
}

// A progressive (multi-scan) JPEG makes libjpeg buffer each component's coefficients for the
// whole image, padded to whole MCUs: for a 4 x 4096 4:2:0 image, luma's 1 x 512 blocks become
// 2 x 512, 65536 coefficients for 16384 pixels. The buffer counts against the limit; a baseline
// file of the same size needs no such buffer.
TEST(ImageIoTest, AMultiScanJpegsCoefficientBufferCountsAgainstThePixelLimit) {
  cv::Mat thin(4096, 4, CV_8UC3);
  cv::randu(thin, 0, 255);
  std::vector<uchar> baseline, progressive;
  ASSERT_TRUE(cv::imencode(".jpg", thin, baseline));
  ASSERT_TRUE(cv::imencode(".jpg", thin, progressive, {cv::IMWRITE_JPEG_PROGRESSIVE, 1}));
  {
    const ScopedMaxImagePixels limit(4 * 4096, "test.max_image_pixels");
    EXPECT_TRUE(Decode(baseline).ok()) << Decode(baseline).status();
    const absl::Status status = Decode(progressive).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(status.message(),
              "the image is 4 x 4096 pixels (16384) and, as a progressive or multi-scan JPEG, "
              "needs libjpeg to buffer 65536 DCT coefficients of its component 0 at once, more "
              "than the limit of 16384 pixels (test.max_image_pixels); raise "
              "test.max_image_pixels in the config if the file is meant to be this large");
  }
  const ScopedMaxImagePixels limit(65536, "test.max_image_pixels");
  absl::StatusOr<cv::Mat> image = Decode(progressive);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(cv::norm(*image, cv::imdecode(progressive, cv::IMREAD_COLOR), cv::NORM_INF), 0);
}

// Arithmetic coding has no bound of blocks by bits: a flat 16 x 16 picture whose header is
// patched to claim 1024 x 1024 pixels decodes without a single libjpeg warning (its decoder
// reads zeros past the scan's data), exactly as cv::imdecode decodes it. Only the pixel limit
// stops the same file claiming 2^30 pixels, sequential or progressive (whose zeros do make
// libjpeg warn, but only once its coefficient buffer is allocated):
// testdata/fuzz/image_decode/regression_arithmetic_* are such files, of 206 and 353 bytes.
TEST(ImageIoTest, ArithmeticCodedJpegsAreBoundedByThePixelLimitAlone) {
  const cv::Mat flat(16, 16, CV_8UC3, cv::Scalar(128, 128, 128));
  const std::vector<uchar> claimed =
      WithFrameSize(EncodeWithLibjpeg(flat, JCS_EXT_BGR, 2, 2, /*arithmetic=*/true), 1024, 1024);
  absl::StatusOr<cv::Mat> image = Decode(claimed);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->size(), cv::Size(1024, 1024));
  EXPECT_EQ(cv::norm(*image, cv::imdecode(claimed, cv::IMREAD_COLOR), cv::NORM_INF), 0);

  for (const bool progressive : {false, true}) {
    const std::vector<uchar> huge = WithFrameSize(
        EncodeWithLibjpeg(flat, JCS_EXT_BGR, 2, 2, /*arithmetic=*/true, progressive), 32768, 32768);
    const absl::Status status = Decode(huge).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(status.message(),
              "the image is 32768 x 32768 pixels (1073741824), more than the limit of 268435456 "
              "pixels (max_image_pixels); raise max_image_pixels in the config if the file is "
              "meant to be this large")
        << progressive;
  }
}

// TIFF: OpenCV's decoder buffers a whole strip (the width times the rows per strip) or tile at
// once, whatever the image's size, so that buffer counts against the limit too.
TEST(ImageIoTest, ATiffsStripBufferCountsAgainstThePixelLimit) {
  std::vector<uchar> bytes = Encode(".tiff");
  ASSERT_EQ(bytes[0], 'I');  // little-endian, as OpenCV writes it
  const size_t ifd = bytes[4] | bytes[5] << 8 | bytes[6] << 16 | size_t{bytes[7]} << 24;
  const size_t entries = bytes[ifd] | bytes[ifd + 1] << 8;
  bool patched = false;
  for (size_t e = 0; e < entries; ++e) {
    uchar* entry = &bytes[ifd + 2 + 12 * e];
    if ((entry[0] | entry[1] << 8) != 278) continue;  // RowsPerStrip
    entry[2] = 4;                                     // LONG, 1000 rows
    entry[3] = 0;
    entry[8] = 1000 & 0xFF;
    entry[9] = 1000 >> 8;
    entry[10] = entry[11] = 0;
    patched = true;
  }
  ASSERT_TRUE(patched);
  const ScopedMaxImagePixels limit(96 * 999, "test.max_image_pixels");
  EXPECT_EQ(Decode(bytes).status().message(),
            "the image is 96 x 64 pixels (6144) and OpenCV would buffer 96 x 1000 pixels of it "
            "at once (a strip), more than the limit of 95904 pixels (test.max_image_pixels); "
            "raise test.max_image_pixels in the config if the file is meant to be this large");
}

TEST(ImageIoTest, APngWhoseFirstChunkIsNotItsHeaderIsCorrupt) {
  std::vector<uchar> bytes = Encode(".png");
  ASSERT_EQ(std::string(bytes.begin() + 12, bytes.begin() + 16), "IHDR");
  bytes[12] = 'i';  // an ancillary chunk "iHDR" before any header
  EXPECT_EQ(std::string(Check(bytes).message()),
            "the PNG file is corrupt: a chunk 'iHDR' where the header chunk (IHDR) should be at "
            "byte 8; copy or download it again");
}

TEST(ImageIoTest, TruncatedPngsAreErrors) {
  const std::vector<uchar> bytes = Encode(".png");
  EXPECT_TRUE(Check(bytes).ok());
  // Without IEND (12 bytes) OpenCV decodes the image all the same.
  const std::string path = Write("no_iend.png", Prefix(bytes, bytes.size() - 12));
  const absl::Status status = ReadImage(path, cv::IMREAD_COLOR, "label map").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(),
              HasSubstr(path + ": the PNG file is truncated: its " +
                        std::to_string(bytes.size() - 12) + " bytes end before the end chunk"));
  for (size_t size = 9; size < bytes.size(); size += 11) {
    EXPECT_EQ(Check(Prefix(bytes, size)).code(), absl::StatusCode::kDataLoss) << size;
  }
}

TEST(ImageIoTest, MissingEmptyAndUndecodableFiles) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  EXPECT_EQ(ReadImage(dir + "/nope.jpg").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(ReadImage(Write("empty.png", {})).status().message(), HasSubstr("file is empty"));
  const absl::Status status = ReadImage(Write("text.jpg", {'h', 'i', '\n'})).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(),
              HasSubstr("text.jpg: the image file is not a JPEG, PNG, BMP, TIFF or WebP file "
                        "(it starts with bytes 68 69 0a)"));
  // A JPEG signature followed by a complete but meaningless structure: the decoder refuses it.
  const absl::Status garbage =
      ReadImage(Write("garbage.jpg", {0xFF, 0xD8, 0xFF, 0xD9}), cv::IMREAD_COLOR, "label map")
          .status();
  EXPECT_EQ(garbage.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(garbage.message(), HasSubstr("garbage.jpg: could not decode the label map"));
}

TEST(ImageIoTest, BmpTiffAndWebPDecodeAsImreadDoes) {
  for (const std::string extension : {".bmp", ".tiff", ".webp"}) {
    std::vector<uchar> bytes;
    std::vector<int> params;
    if (extension == ".webp") params = {cv::IMWRITE_WEBP_QUALITY, 101};  // lossless
    ASSERT_TRUE(cv::imencode(extension, Picture(), bytes, params)) << extension;
    const absl::string_view view(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    EXPECT_FALSE(SniffImageFormat(view).empty()) << extension;
    absl::StatusOr<cv::Mat> image = DecodeImage(view);
    ASSERT_TRUE(image.ok()) << extension << ": " << image.status();
    EXPECT_EQ(cv::norm(*image, cv::imdecode(bytes, cv::IMREAD_COLOR), cv::NORM_INF), 0)
        << extension;
  }
}

// OpenCV picks a decoder by the file's signature among all it was built with; formats no
// dataset needs are refused before any decoder runs. Fuzzing found that a file with DICOM's
// "DICM" tag at byte 128 makes Debian's OpenCV hand it to GDCM, which aborts the process on an
// assertion (testdata/fuzz/cityscapes_label/regression_dicom_preamble_gdcm_abort.bin).
TEST(ImageIoTest, OtherFormatsAreRefusedBeforeDecoding) {
  std::string dicom(128, '\xFF');
  dicom += "DICM";
  dicom += std::string(64, '\0');
  std::string pgm = "P5\n2 2\n255\n";
  pgm += std::string(4, '\x80');
  std::string radiance = "#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n-Y 1 +X 1\n";
  radiance += std::string(4, '\x80');
  for (const std::string& bytes : {dicom, pgm, radiance}) {
    EXPECT_TRUE(SniffImageFormat(bytes).empty());
    const absl::Status status = DecodeImage(bytes, cv::IMREAD_UNCHANGED, "label map").status();
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(status.message(),
                HasSubstr("the label map file is not a JPEG, PNG, BMP, TIFF or WebP file"));
  }
  EXPECT_FALSE(cv::imdecode(std::vector<uchar>(pgm.begin(), pgm.end()), cv::IMREAD_UNCHANGED)
                   .empty());  // OpenCV alone would have decoded the PGM
}

}  // namespace
}  // namespace vision::core
