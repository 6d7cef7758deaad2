#include "core/image_io.h"

#include <cstdlib>
#include <fstream>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::core {
namespace {

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
