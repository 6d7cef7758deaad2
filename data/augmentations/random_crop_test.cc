#include "data/augmentations/random_crop.h"

#include <memory>
#include <random>

#include "core/augmentation.h"
#include "core/polygon.h"
#include "core/sample.h"
#include "data/augmentations/augmentations.pb.h"
#include "data/augmentations/test_util.h"
#include "gtest/gtest.h"

namespace vision::data::augmentations {
namespace {

using testing::MakeAugmentation;
using testing::Rect;

// Counts extents a window cuts, checked independently of the search's own bookkeeping.
int Cuts(const std::vector<CropExtent>& extents, cv::Point origin, cv::Size window) {
  const cv::Rect2f w(origin.x, origin.y, window.width, window.height);
  int cuts = 0;
  for (const CropExtent& e : extents) {
    const cv::Rect2f overlap = e.box & w;
    if (overlap.area() > 0 && overlap.area() < e.box.area()) ++cuts;
  }
  return cuts;
}

core::Sample SampleWithTexts(cv::Size size, const std::vector<core::Polygon>& polygons) {
  core::Sample sample;
  sample.id = "crop";
  sample.image = cv::Mat(size, CV_8UC3, cv::Scalar::all(7));
  for (const core::Polygon& polygon : polygons) sample.texts.push_back({polygon, "t"});
  return sample;
}

TEST(ChooseCropOriginTest, NeverCutsWhenACutFreeWindowExists) {
  // Columns [10,50] [60,100] [150,190] [230,290], rows spread out: cut-free windows exist
  // (for instance x 100..200, y 0..100) but most windows cut something.
  const core::Sample sample =
      SampleWithTexts(cv::Size(300, 200), {Rect(10, 10, 40, 30), Rect(60, 120, 40, 60),
                                           Rect(150, 40, 40, 30), Rect(230, 90, 60, 50)});
  const std::vector<CropExtent> extents = CropExtents(sample);
  ASSERT_EQ(extents.size(), 4u);
  const cv::Size window(100, 100);
  int cut_by_uniform = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    std::mt19937_64 rng(seed);
    const cv::Point origin = ChooseCropOrigin(sample.image.size(), window, extents, 5, rng);
    ASSERT_GE(origin.x, 0);
    ASSERT_GE(origin.y, 0);
    ASSERT_LE(origin.x + window.width, 300);
    ASSERT_LE(origin.y + window.height, 200);
    EXPECT_EQ(Cuts(extents, origin, window), 0) << "seed " << seed << " " << origin;
    cut_by_uniform += Cuts(extents, cv::Point(rng() % 201, rng() % 101), window) > 0;
  }
  // The case is not trivial: a uniformly drawn window usually cuts.
  EXPECT_GT(cut_by_uniform, 100);
}

TEST(ChooseCropOriginTest, FindsTheOnlyCutFreePositions) {
  // Two texts tile the width; only x = 0 and x = 100 keep both edges out of them, 2 of the
  // 101 positions, which random tries alone would usually miss.
  const core::Sample sample =
      SampleWithTexts(cv::Size(200, 50), {Rect(0, 10, 100, 20), Rect(100, 10, 100, 20)});
  for (uint64_t seed = 0; seed < 50; ++seed) {
    std::mt19937_64 rng(seed);
    const cv::Point origin =
        ChooseCropOrigin(cv::Size(200, 50), cv::Size(100, 50), CropExtents(sample), 3, rng);
    EXPECT_TRUE(origin.x == 0 || origin.x == 100) << origin.x;
    EXPECT_EQ(origin.y, 0);
  }
}

TEST(ChooseCropOriginTest, PrefersWindowsHoldingAWantedInstance) {
  core::Sample sample = SampleWithTexts(cv::Size(400, 100), {Rect(300, 20, 40, 20)});
  sample.texts.push_back({Rect(20, 20, 40, 20), "###", /*ignore=*/true});
  for (uint64_t seed = 0; seed < 50; ++seed) {
    std::mt19937_64 rng(seed);
    const cv::Point origin =
        ChooseCropOrigin(cv::Size(400, 100), cv::Size(100, 100), CropExtents(sample), 50, rng);
    EXPECT_TRUE(origin.x >= 240 && origin.x <= 300) << origin.x;
  }
}

TEST(RandomCropTest, CroppedTextsAreWholeWhenACutFreeWindowExists) {
  RandomCropOptions options;
  options.set_width(100);
  options.set_height(100);
  absl::StatusOr<std::unique_ptr<core::Augmentation>> crop =
      MakeAugmentation("RandomCrop", options);
  ASSERT_TRUE(crop.ok()) << crop.status();
  for (uint64_t seed = 0; seed < 30; ++seed) {
    core::Sample sample =
        SampleWithTexts(cv::Size(300, 200), {Rect(10, 10, 40, 30), Rect(60, 120, 40, 60),
                                             Rect(150, 40, 40, 30), Rect(230, 90, 60, 50)});
    std::mt19937_64 rng(seed);
    ASSERT_TRUE((*crop)->Apply(&sample, rng).ok());
    EXPECT_EQ(sample.image.size(), cv::Size(100, 100));
    ASSERT_FALSE(sample.texts.empty());
    for (const core::TextInstance& text : sample.texts) {
      EXPECT_FALSE(text.ignore);
      ASSERT_EQ(text.polygon.size(), 4u);
      const double area = core::PolygonArea(text.polygon);
      EXPECT_TRUE(area == 1200 || area == 2400 || area == 3000) << area;
    }
  }
}

TEST(RandomCropTest, FallsBackAndClipsWhenEveryWindowCuts) {
  RandomCropOptions options;
  options.set_width(100);
  options.set_height(50);
  absl::StatusOr<std::unique_ptr<core::Augmentation>> crop =
      MakeAugmentation("RandomCrop", options);
  ASSERT_TRUE(crop.ok()) << crop.status();
  core::Sample sample = SampleWithTexts(cv::Size(200, 50), {Rect(10, 10, 180, 20)});
  std::mt19937_64 rng(3);
  ASSERT_TRUE((*crop)->Apply(&sample, rng).ok());
  ASSERT_EQ(sample.texts.size(), 1u);
  // At most 100 of the 180 columns fit: clipped, and below half visible when <= 90 remain.
  const double area = core::PolygonArea(sample.texts[0].polygon);
  EXPECT_LE(area, 100 * 20 + 1e-3);
  EXPECT_EQ(sample.texts[0].ignore, area < 0.5 * 180 * 20);
}

TEST(RandomCropTest, PadsSmallImagesAtBottomRight) {
  RandomCropOptions options;
  options.set_width(64);
  options.set_height(48);
  options.add_image_fill(9);
  absl::StatusOr<std::unique_ptr<core::Augmentation>> crop =
      MakeAugmentation("RandomCrop", options);
  ASSERT_TRUE(crop.ok()) << crop.status();
  core::Sample sample = SampleWithTexts(cv::Size(50, 40), {Rect(5, 5, 10, 10)});
  sample.semantic = cv::Mat(40, 50, CV_8U, cv::Scalar(1));
  std::mt19937_64 rng(0);
  ASSERT_TRUE((*crop)->Apply(&sample, rng).ok());
  ASSERT_EQ(sample.image.size(), cv::Size(64, 48));
  EXPECT_EQ(cv::norm(sample.image(cv::Rect(0, 0, 50, 40)), cv::NORM_INF), 7);
  EXPECT_EQ(cv::countNonZero(sample.semantic(cv::Rect(0, 0, 50, 40)) != 1), 0);
  EXPECT_EQ(sample.semantic.at<uint8_t>(47, 63), 255);
  EXPECT_EQ(sample.image.at<cv::Vec3b>(47, 63), cv::Vec3b(9, 9, 9));
  EXPECT_EQ(sample.image.at<cv::Vec3b>(0, 55), cv::Vec3b(9, 9, 9));
  ASSERT_EQ(sample.texts.size(), 1u);
  EXPECT_EQ(sample.texts[0].polygon, Rect(5, 5, 10, 10));
  EXPECT_EQ(sample.scale_x, 1.0);
}

TEST(RandomCropTest, RejectsBadOptions) {
  RandomCropOptions options;
  options.set_width(0);
  EXPECT_FALSE(MakeAugmentation("RandomCrop", options).ok());
  options.set_width(10);
  for (int i = 0; i < 5; ++i) options.add_image_fill(0);
  EXPECT_FALSE(MakeAugmentation("RandomCrop", options).ok());
}

}  // namespace
}  // namespace vision::data::augmentations
