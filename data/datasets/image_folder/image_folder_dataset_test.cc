#include "data/datasets/image_folder/image_folder_dataset.h"

#include <filesystem>
#include <fstream>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::data::datasets::image_folder {
namespace {

using ::testing::HasSubstr;

constexpr char kImages[] = "testdata/icdar2015/ch4_training_images";

absl::StatusOr<std::unique_ptr<ImageFolderDataset>> Open(const std::string& path) {
  ImageFolderOptions options;
  options.set_path(path);
  return ImageFolderDataset::Create(options);
}

TEST(ImageFolderDatasetTest, ListsTheFolderSortedAndDecodesWithoutAnnotations) {
  auto dataset = Open(kImages);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  ASSERT_EQ((*dataset)->Size(), 3);
  absl::StatusOr<core::Sample> first = (*dataset)->Load(0);
  ASSERT_TRUE(first.ok()) << first.status();
  // Sorted by name: img_1, img_10, img_2.
  EXPECT_EQ(first->id, "img_1");
  EXPECT_EQ((*dataset)->Load(1)->id, "img_10");
  EXPECT_EQ(first->image.channels(), 3);
  EXPECT_EQ(first->original_width, first->image.cols);
  EXPECT_TRUE(first->texts.empty());
  EXPECT_TRUE(first->objects.empty());
}

TEST(ImageFolderDatasetTest, TakesASingleFile) {
  auto dataset = Open(std::string(kImages) + "/img_2.jpg");
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->Size(), 1);
}

TEST(ImageFolderDatasetTest, BadPathsAreNamed) {
  EXPECT_THAT(Open("no/such/place").status().message(),
              HasSubstr("'no/such/place' is neither a file nor a folder"));
  const std::string empty = std::string(std::getenv("TEST_TMPDIR")) + "/empty";
  std::filesystem::create_directories(empty);
  EXPECT_THAT(Open(empty).status().message(), HasSubstr("no .jpg, .jpeg or .png files in"));
  const std::string broken = std::string(std::getenv("TEST_TMPDIR")) + "/broken";
  std::filesystem::create_directories(broken);
  std::ofstream(broken + "/x.jpg") << "not a jpeg";
  auto dataset = Open(broken);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_THAT((*dataset)->Load(0).status().message(),
              HasSubstr("x.jpg: the image file is not a JPEG, PNG"));
  // A JPEG cut short is a bad image too, not one with a grey lower part.
  std::vector<uchar> jpeg;
  ASSERT_TRUE(cv::imencode(".jpg", cv::Mat(64, 64, CV_8UC3, cv::Scalar(10, 200, 30)), jpeg));
  std::ofstream(broken + "/x.jpg", std::ios::binary)
      .write(reinterpret_cast<const char*>(jpeg.data()),
             static_cast<std::streamsize>(jpeg.size() / 2));
  EXPECT_THAT((*dataset)->Load(0).status().message(),
              HasSubstr("x.jpg: the JPEG file is truncated"));
}

}  // namespace
}  // namespace vision::data::datasets::image_folder
