#include "engine/logging/tensorboard_writer.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/logging/tensorboard.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::engine::logging {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string FreshDir(const std::string& name) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/", name);
  std::filesystem::remove_all(dir);
  return dir;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

Event ParseEvent(const std::string& record) {
  Event event;
  EXPECT_TRUE(event.ParseFromString(record));
  return event;
}

// Golden bytes computed independently (Python, bit-by-bit CRC) for the record "hello".
TEST(TensorBoardWriterTest, FrameMatchesGolden) {
  const std::string golden(
      "\x05\x00\x00\x00\x00\x00\x00\x00\xea\xb2\x04\x3e\x68\x65\x6c\x6c\x6f\xbb\x1f\x1c\x19", 21);
  EXPECT_EQ(FrameTfRecord("hello"), golden);
}

TEST(TensorBoardWriterTest, ScalarsAndImageReadBack) {
  const std::string dir = FreshDir("scalars_and_image");
  cv::Mat image(5, 7, CV_8UC3);
  cv::randu(image, 0, 256);
  std::string path;
  {
    auto writer = TensorBoardWriter::Create(dir);
    ASSERT_TRUE(writer.ok()) << writer.status();
    path = (*writer)->path();
    ASSERT_TRUE((*writer)->AddScalar("train/loss", 1.2345678f, 10).ok());
    ASSERT_TRUE((*writer)->AddScalar("train/lr", 6.9e-3f, 20).ok());
    ASSERT_TRUE((*writer)->AddImage("eval/sample", image, 30).ok());
    // No Flush: the destructor must flush.
  }
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  EXPECT_EQ(std::filesystem::path(path).parent_path(), std::filesystem::path(dir));
  EXPECT_THAT(std::filesystem::path(path).filename().string(), StartsWith("events.out.tfevents."));
  EXPECT_THAT(path, HasSubstr(absl::StrCat(".", host)));

  auto records = ReadTfRecords(path);
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 4u);

  const Event version = ParseEvent((*records)[0]);
  EXPECT_EQ(version.file_version(), "brain.Event:2");
  EXPECT_GT(version.wall_time(), 1.6e9);

  const Event loss = ParseEvent((*records)[1]);
  EXPECT_EQ(loss.step(), 10);
  EXPECT_GE(loss.wall_time(), version.wall_time());
  ASSERT_EQ(loss.summary().value_size(), 1);
  EXPECT_EQ(loss.summary().value(0).tag(), "train/loss");
  EXPECT_EQ(loss.summary().value(0).simple_value(), 1.2345678f);

  const Event lr = ParseEvent((*records)[2]);
  EXPECT_EQ(lr.step(), 20);
  EXPECT_EQ(lr.summary().value(0).tag(), "train/lr");
  EXPECT_EQ(lr.summary().value(0).simple_value(), 6.9e-3f);

  const Event img = ParseEvent((*records)[3]);
  EXPECT_EQ(img.step(), 30);
  ASSERT_TRUE(img.summary().value(0).has_image());
  const Summary::Image& stored = img.summary().value(0).image();
  EXPECT_EQ(img.summary().value(0).tag(), "eval/sample");
  EXPECT_EQ(stored.height(), 5);
  EXPECT_EQ(stored.width(), 7);
  EXPECT_EQ(stored.colorspace(), 3);
  const std::string& png = stored.encoded_image_string();
  EXPECT_THAT(png, StartsWith("\x89PNG"));
  const cv::Mat decoded =
      cv::imdecode(std::vector<unsigned char>(png.begin(), png.end()), cv::IMREAD_UNCHANGED);
  ASSERT_EQ(decoded.rows, 5);
  ASSERT_EQ(decoded.cols, 7);
  ASSERT_EQ(decoded.type(), CV_8UC3);
  EXPECT_EQ(cv::norm(decoded, image, cv::NORM_INF), 0.0);  // PNG is lossless
}

TEST(TensorBoardWriterTest, GrayscaleImageHasColorspaceOne) {
  auto writer = TensorBoardWriter::Create(FreshDir("gray"));
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->AddImage("prob", cv::Mat(3, 4, CV_8UC1, cv::Scalar(200)), 1).ok());
  ASSERT_TRUE((*writer)->Flush().ok());
  auto records = ReadTfRecords((*writer)->path());
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 2u);
  // The event is kept: a reference into a temporary Event dangles (ASan: heap-use-after-free).
  const Event event = ParseEvent((*records)[1]);
  const Summary::Image& image = event.summary().value(0).image();
  EXPECT_EQ(image.colorspace(), 1);
  EXPECT_EQ(image.height(), 3);
  EXPECT_EQ(image.width(), 4);
}

TEST(TensorBoardWriterTest, RejectsBadImagesAndTags) {
  auto writer = TensorBoardWriter::Create(FreshDir("bad_input"));
  ASSERT_TRUE(writer.ok()) << writer.status();
  const absl::Status float_image = (*writer)->AddImage("x", cv::Mat(2, 2, CV_32FC3), 0);
  EXPECT_EQ(float_image.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(float_image.message(), HasSubstr("CV_8UC3"));
  EXPECT_EQ((*writer)->AddImage("x", cv::Mat(), 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*writer)->AddScalar("", 1.0f, 0).code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorBoardWriterTest, SecondWriterInSameDirectoryDoesNotClobberFirst) {
  const std::string dir = FreshDir("two_writers");
  auto first = TensorBoardWriter::Create(dir);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE((*first)->AddScalar("a", 1.0f, 1).ok());
  ASSERT_TRUE((*first)->Flush().ok());
  auto second = TensorBoardWriter::Create(dir);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_NE((*first)->path(), (*second)->path());
  auto records = ReadTfRecords((*first)->path());
  ASSERT_TRUE(records.ok()) << records.status();
  EXPECT_EQ(records->size(), 2u);
}

TEST(TensorBoardWriterTest, UncreatableDirectoryNamesPathAndReason) {
  const std::string dir = FreshDir("blocked");
  std::filesystem::create_directories(dir);
  const std::string file = dir + "/a_file";
  WriteBytes(file, "x");
  auto writer = TensorBoardWriter::Create(file + "/logs");
  ASSERT_FALSE(writer.ok());
  EXPECT_THAT(writer.status().message(), HasSubstr(file + "/logs"));
  EXPECT_THAT(writer.status().message(), HasSubstr("Not a directory"));
}

class CorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto writer = TensorBoardWriter::Create(FreshDir("corruption"));
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE((*writer)->AddScalar("a", 1.0f, 1).ok());
    ASSERT_TRUE((*writer)->AddScalar("b", 2.0f, 2).ok());
    ASSERT_TRUE((*writer)->Flush().ok());
    path_ = (*writer)->path();
    bytes_ = ReadBytes(path_);
    auto records = ReadTfRecords(path_);
    ASSERT_TRUE(records.ok()) << records.status();
    ASSERT_EQ(records->size(), 3u);
    // Offsets of records 1 and 2: each record is its payload plus 16 framing bytes.
    second_ = (*records)[0].size() + 16;
    third_ = second_ + (*records)[1].size() + 16;
    ASSERT_EQ(third_ + (*records)[2].size() + 16, bytes_.size());
  }

  absl::Status ReadModified(const std::string& bytes) {
    WriteBytes(path_, bytes);
    return ReadTfRecords(path_).status();
  }

  std::string path_;
  std::string bytes_;
  size_t second_ = 0;
  size_t third_ = 0;
};

TEST_F(CorruptionTest, FlippedDataByteReportsRecordOffset) {
  std::string bytes = bytes_;
  bytes[second_ + 12 + 3] ^= 0x01;
  const absl::Status s = ReadModified(bytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(),
              HasSubstr(absl::StrCat("record 1 at byte offset ", second_, ": data CRC")));
  EXPECT_THAT(s.message(), HasSubstr(path_));
}

TEST_F(CorruptionTest, FlippedLengthByteReportsRecordOffset) {
  std::string bytes = bytes_;
  bytes[third_ + 1] ^= 0x40;
  const absl::Status s = ReadModified(bytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(),
              HasSubstr(absl::StrCat("record 2 at byte offset ", third_, ": length CRC")));
}

TEST_F(CorruptionTest, TruncationReportsRecordOffset) {
  for (size_t cut : {size_t{1}, size_t{4}, size_t{10}, bytes_.size() - third_ - 5}) {
    const absl::Status s = ReadModified(bytes_.substr(0, bytes_.size() - cut));
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << cut;
    EXPECT_THAT(s.message(),
                HasSubstr(absl::StrCat("record 2 at byte offset ", third_, ": truncated")))
        << cut;
  }
}

TEST(ReadTfRecordsTest, MissingFileIsNotFound) {
  const auto records = ReadTfRecords(FreshDir("missing") + "/nothing");
  EXPECT_EQ(records.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(records.status().message(), HasSubstr("missing/nothing"));
}

}  // namespace
}  // namespace vision::engine::logging
