#include "data/augmentations/random_crop.h"

#include <cmath>
#include <memory>
#include <random>
#include <string>

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
  const core::Sample sample = SampleWithTexts(
      cv::Size(300, 200),
      {Rect(10, 10, 40, 30), Rect(60, 120, 40, 60), Rect(150, 40, 40, 30), Rect(230, 90, 60, 50)});
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

// MhLiao/DB's window (min_side_ratio mode): sides of at least the ratio, edges never inside a
// wanted text's rounded projection, and some wanted text reached.
TEST(ChooseScaledCropWindowTest, WindowsAreLargeEnoughCutNoWantedTextAndReachOne) {
  const core::Sample sample = SampleWithTexts(
      cv::Size(300, 200), {Rect(10.4, 10, 40, 30), Rect(60, 120.6, 40, 60), Rect(150, 40, 40, 30)});
  const std::vector<CropExtent> extents = CropExtents(sample);
  int cropped = 0;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    std::mt19937_64 rng(seed);
    const cv::Rect w = ChooseScaledCropWindow(cv::Size(300, 200), extents, 0.1f, 10, rng);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " window " << w);
    ASSERT_GE(w.width, 30);
    ASSERT_GE(w.height, 20);
    ASSERT_LE(w.x + w.width, 300);
    ASSERT_LE(w.y + w.height, 200);
    if (w == cv::Rect(0, 0, 300, 200)) continue;
    ++cropped;
    bool reaches = false;
    for (const CropExtent& e : extents) {
      const int x0 = static_cast<int>(std::nearbyint(e.box.x));
      const int x1 = static_cast<int>(std::nearbyint(e.box.x + e.box.width));
      const int y0 = static_cast<int>(std::nearbyint(e.box.y));
      const int y1 = static_cast<int>(std::nearbyint(e.box.y + e.box.height));
      for (int edge : {w.x, w.x + w.width}) EXPECT_FALSE(edge >= x0 && edge < x1) << edge;
      for (int edge : {w.y, w.y + w.height}) EXPECT_FALSE(edge >= y0 && edge < y1) << edge;
      reaches |= !(e.box.x + e.box.width < w.x || e.box.x > w.x + w.width ||
                   e.box.y + e.box.height < w.y || e.box.y > w.y + w.height);
    }
    EXPECT_TRUE(reaches);
  }
  // Not a trivial pass: most draws give a window smaller than the image.
  EXPECT_GT(cropped, 150);
}

// The reference's split_regions drops the last run of free positions: with columns blocked at
// [100, 110) and [200, 210), the runs kept are [0, 100) and [110, 200), so no edge lies in
// [210, 300); rows are one run, drawn from every free row.
TEST(ChooseScaledCropWindowTest, TheLastFreeRunIsNeverAnEdgeAsInTheReference) {
  const core::Sample sample =
      SampleWithTexts(cv::Size(300, 100), {Rect(100, 40, 10, 10), Rect(200, 40, 10, 10)});
  const std::vector<CropExtent> extents = CropExtents(sample);
  int right_edges_in_second_run = 0;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    std::mt19937_64 rng(seed);
    const cv::Rect w = ChooseScaledCropWindow(cv::Size(300, 100), extents, 0.1f, 10, rng);
    if (w == cv::Rect(0, 0, 300, 100)) continue;
    EXPECT_LT(w.x + w.width, 200) << "seed " << seed << " window " << w;
    right_edges_in_second_run += w.x + w.width >= 110;
  }
  EXPECT_GT(right_edges_in_second_run, 50);
}

TEST(ChooseScaledCropWindowTest, WholeImageWithoutWantedTextsOrFreeRows) {
  std::mt19937_64 rng(3);
  // Only an ignored text: nothing is wanted, so no window is acceptable (as the reference).
  core::Sample ignored = SampleWithTexts(cv::Size(120, 80), {Rect(10, 10, 20, 20)});
  ignored.texts[0].ignore = true;
  EXPECT_EQ(ChooseScaledCropWindow(cv::Size(120, 80), CropExtents(ignored), 0.1f, 10, rng),
            cv::Rect(0, 0, 120, 80));
  // A text spanning every row leaves no free row.
  const core::Sample tall = SampleWithTexts(cv::Size(120, 80), {Rect(10, 0, 20, 80)});
  EXPECT_EQ(ChooseScaledCropWindow(cv::Size(120, 80), CropExtents(tall), 0.1f, 10, rng),
            cv::Rect(0, 0, 120, 80));
}

// The whole 400x200 image (no wanted text) fitted into 64x64: resized to 64x32 (scale 0.16,
// cv::resize of a uniform image stays uniform), then padded with the fill below.
TEST(RandomCropTest, MinSideRatioResizesTheWindowToFitAndPads) {
  RandomCropOptions options;
  options.set_width(64);
  options.set_height(64);
  options.set_min_side_ratio(0.1f);
  options.set_max_tries(10);
  options.add_image_fill(3);
  absl::StatusOr<std::unique_ptr<core::Augmentation>> crop =
      MakeAugmentation("RandomCrop", options);
  ASSERT_TRUE(crop.ok()) << crop.status();
  core::Sample sample = SampleWithTexts(cv::Size(400, 200), {Rect(100, 50, 50, 25)});
  sample.texts[0].ignore = true;
  std::mt19937_64 rng(0);
  ASSERT_TRUE((*crop)->Apply(&sample, rng).ok());
  ASSERT_EQ(sample.image.size(), cv::Size(64, 64));
  EXPECT_EQ(cv::norm(sample.image(cv::Rect(0, 0, 64, 32)) - cv::Scalar::all(7), cv::NORM_INF), 0);
  EXPECT_EQ(cv::norm(sample.image(cv::Rect(0, 32, 64, 32)) - cv::Scalar::all(3), cv::NORM_INF), 0);
  EXPECT_DOUBLE_EQ(sample.scale_x, 0.16);
  EXPECT_DOUBLE_EQ(sample.scale_y, 0.16);
  ASSERT_EQ(sample.texts.size(), 1u);
  EXPECT_EQ(sample.texts[0].polygon, Rect(16, 8, 8, 4));
}

// A window with a wanted text: the text lies inside the output, scaled by the fitted size's
// ratio, and the output is always width x height.
TEST(RandomCropTest, MinSideRatioKeepsTheTextInsideTheOutput) {
  RandomCropOptions options;
  options.set_width(64);
  options.set_height(48);
  options.set_min_side_ratio(0.1f);
  absl::StatusOr<std::unique_ptr<core::Augmentation>> crop =
      MakeAugmentation("RandomCrop", options);
  ASSERT_TRUE(crop.ok()) << crop.status();
  for (uint64_t seed = 0; seed < 20; ++seed) {
    core::Sample sample = SampleWithTexts(cv::Size(300, 200), {Rect(120, 80, 40, 20)});
    std::mt19937_64 rng(seed);
    ASSERT_TRUE((*crop)->Apply(&sample, rng).ok());
    ASSERT_EQ(sample.image.size(), cv::Size(64, 48));
    ASSERT_EQ(sample.texts.size(), 1u) << "seed " << seed;
    const cv::Rect2f bounds = core::PolygonBounds(sample.texts[0].polygon);
    EXPECT_GE(bounds.x, -1e-3) << "seed " << seed;
    EXPECT_LE(bounds.x + bounds.width, 64 + 1e-3) << "seed " << seed;
    EXPECT_NEAR(bounds.width / bounds.height, 2.0, 0.15) << "seed " << seed;
  }
}

TEST(RandomCropTest, RejectsAMinSideRatioAboveOne) {
  RandomCropOptions options;
  options.set_min_side_ratio(1.5f);
  absl::StatusOr<std::unique_ptr<core::Augmentation>> crop =
      MakeAugmentation("RandomCrop", options);
  ASSERT_FALSE(crop.ok());
  EXPECT_NE(crop.status().message().find("min_side_ratio"), std::string::npos) << crop.status();
}

}  // namespace
}  // namespace vision::data::augmentations
