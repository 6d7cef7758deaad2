#include "data/augmentations/geometry.h"

#include <random>

#include "core/polygon.h"
#include "core/run_length_mask.h"
#include "core/sample.h"
#include "data/augmentations/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::data::augmentations {
namespace {

using ::testing::HasSubstr;
using testing::Rect;

core::Sample BlankSample(int width, int height) {
  core::Sample sample;
  sample.id = "blank";
  sample.image = cv::Mat(height, width, CV_8UC3, cv::Scalar::all(0));
  return sample;
}

cv::Matx23d Translation(double dx, double dy) { return cv::Matx23d(1, 0, dx, 0, 1, dy); }

TEST(RleTest, EncodesColumnMajorStartingWithBackground) {
  const cv::Mat mask = (cv::Mat_<uint8_t>(2, 3) << 0, 1, 1,  //
                        0, 0, 1);
  // Column-major: 0 0 | 1 0 | 1 1.
  const core::RunLengthMask rle = core::EncodeRle(mask);
  EXPECT_EQ(rle.height, 2);
  EXPECT_EQ(rle.width, 3);
  EXPECT_EQ(rle.counts, (std::vector<uint32_t>{2, 1, 1, 2}));
  absl::StatusOr<cv::Mat> decoded = core::DecodeRle(rle);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(cv::countNonZero(*decoded != mask), 0);
}

TEST(RleTest, RoundTripsRandomMasks) {
  cv::Mat mask(13, 17, CV_8U);
  cv::RNG(5).fill(mask, cv::RNG::UNIFORM, 0, 2);
  absl::StatusOr<cv::Mat> decoded = core::DecodeRle(core::EncodeRle(mask));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(cv::countNonZero(*decoded != mask), 0);
}

TEST(RleTest, RejectsCountsOfAnotherSize) {
  core::RunLengthMask rle{2, 3, {2, 1, 1}};
  EXPECT_THAT(core::DecodeRle(rle).status().message(), HasSubstr("cover 4 of the mask's 6"));
  rle.counts = {2, 1, 1, 5};
  EXPECT_THAT(core::DecodeRle(rle).status().message(), HasSubstr("exceed"));
}

TEST(WarpRasterTest, IntegerTranslationCopiesExactlyAndFills) {
  cv::Mat src(4, 5, CV_8U);
  cv::RNG(1).fill(src, cv::RNG::UNIFORM, 0, 200);
  const cv::Mat out = WarpRaster(src, Translation(2, -1), cv::Size(6, 4), cv::INTER_LINEAR,
                                 cv::Scalar(255));
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 6; ++c) {
      const int sr = r + 1, sc = c - 2;
      const int expected = (sr < 4 && sc >= 0 && sc < 5) ? src.at<uint8_t>(sr, sc) : 255;
      EXPECT_EQ(out.at<uint8_t>(r, c), expected) << r << "," << c;
    }
  }
}

TEST(WarpSampleTest, MirroringKeepsQuadStartingTopLeft) {
  core::Sample sample = BlankSample(100, 50);
  sample.texts.push_back({Rect(10, 20, 20, 20), "a"});
  ASSERT_TRUE(WarpSample(cv::Matx23d(-1, 0, 100, 0, 1, 0), cv::Size(100, 50), WarpParams(),
                         &sample)
                  .ok());
  ASSERT_EQ(sample.texts.size(), 1u);
  EXPECT_EQ(sample.texts[0].polygon, Rect(70, 20, 20, 20));
}

TEST(WarpSampleTest, TextRuleClipsMarksIgnoreOrDrops) {
  core::Sample sample = BlankSample(40, 40);
  sample.texts.push_back({Rect(3, 0, 10, 10), "mostly visible"});   // 7 of 10 columns stay
  sample.texts.push_back({Rect(0, 20, 10, 10), "mostly hidden"});   // 4 of 10 columns stay
  sample.texts.push_back({Rect(-5, 0, 4, 10), "outside"});          // moves further out
  ASSERT_TRUE(WarpSample(Translation(-6, 0), cv::Size(40, 40), WarpParams(), &sample).ok());
  ASSERT_EQ(sample.texts.size(), 2u);
  EXPECT_EQ(sample.texts[0].transcription, "mostly visible");
  EXPECT_FALSE(sample.texts[0].ignore);
  EXPECT_NEAR(core::PolygonArea(sample.texts[0].polygon), 70, 1e-3);
  EXPECT_EQ(sample.texts[1].transcription, "mostly hidden");
  EXPECT_TRUE(sample.texts[1].ignore);
  EXPECT_NEAR(core::PolygonArea(sample.texts[1].polygon), 40, 1e-3);
  for (const cv::Point2f& p : sample.texts[1].polygon) EXPECT_GE(p.x, 0);
}

TEST(WarpSampleTest, ObjectRuleRecomputesBoxesAndDropsTinyRemains) {
  core::Sample sample = BlankSample(40, 40);
  core::ObjectInstance polygon_object;
  polygon_object.annotation_id = 1;
  polygon_object.polygons = {Rect(0, 0, 10, 10)};
  polygon_object.box = cv::Rect2f(0, 0, 10, 10);
  core::ObjectInstance sliver = polygon_object;  // 0.2 x 10 = 2 px^2 remain: below 4
  sliver.annotation_id = 2;
  sliver.polygons = {Rect(0.0f, 20, 9.2f, 10)};
  core::ObjectInstance box_only;
  box_only.annotation_id = 3;
  box_only.box = cv::Rect2f(5, 30, 10, 5);
  sample.objects = {polygon_object, sliver, box_only};
  ASSERT_TRUE(WarpSample(Translation(-9, 0), cv::Size(40, 40), WarpParams(), &sample).ok());
  ASSERT_EQ(sample.objects.size(), 2u);
  EXPECT_EQ(sample.objects[0].annotation_id, 1);
  EXPECT_EQ(sample.objects[0].box, cv::Rect2f(0, 0, 1, 10));
  EXPECT_EQ(sample.objects[1].annotation_id, 3);
  EXPECT_EQ(sample.objects[1].box, cv::Rect2f(0, 30, 6, 5));
}

TEST(WarpSampleTest, RleObjectMovesWithImageAndGetsItsBox) {
  core::Sample sample = BlankSample(20, 10);
  cv::Mat mask(10, 20, CV_8U, cv::Scalar(0));
  mask(cv::Rect(4, 2, 5, 3)).setTo(1);
  core::ObjectInstance object;
  object.rle = core::EncodeRle(mask);
  object.box = cv::Rect2f(4, 2, 5, 3);
  sample.objects.push_back(object);
  ASSERT_TRUE(WarpSample(Translation(3, 1), cv::Size(20, 10), WarpParams(), &sample).ok());
  ASSERT_EQ(sample.objects.size(), 1u);
  EXPECT_EQ(sample.objects[0].box, cv::Rect2f(7, 3, 5, 3));
  absl::StatusOr<cv::Mat> moved = core::DecodeRle(sample.objects[0].rle);
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(cv::countNonZero(*moved), 15);
  EXPECT_EQ(cv::countNonZero((*moved)(cv::Rect(7, 3, 5, 3))), 15);
}

TEST(WarpSampleTest, RejectsRastersOfAnotherSize) {
  core::Sample sample = BlankSample(20, 10);
  sample.semantic = cv::Mat(5, 5, CV_8U, cv::Scalar(0));
  EXPECT_THAT(WarpSample(Translation(1, 0), cv::Size(20, 10), WarpParams(), &sample).message(),
              HasSubstr("semantic map is 5x5 but the image is 10x20"));

  sample = BlankSample(20, 10);
  core::ObjectInstance object;
  object.annotation_id = 77;
  object.rle = core::EncodeRle(cv::Mat(4, 4, CV_8U, cv::Scalar(1)));
  sample.objects.push_back(object);
  EXPECT_THAT(WarpSample(Translation(1, 0), cv::Size(20, 10), WarpParams(), &sample).message(),
              HasSubstr("annotation 77: RLE mask is 4x4"));
}

TEST(WarpSampleTest, NeedsAnImage) {
  core::Sample sample;
  sample.id = "img_3.jpg";
  EXPECT_THAT(WarpSample(Translation(1, 0), cv::Size(2, 2), WarpParams(), &sample).message(),
              HasSubstr("'img_3.jpg': has no image"));
}

TEST(ResizeSampleTest, ScalesCoordinatesExactlyAndComposesScaleFactors) {
  core::Sample sample = BlankSample(40, 20);
  sample.texts.push_back({Rect(10, 4, 8, 6), "a"});
  ASSERT_TRUE(ResizeSample(cv::Size(30, 10), &sample).ok());
  ASSERT_TRUE(ResizeSample(cv::Size(60, 40), &sample).ok());
  EXPECT_EQ(sample.image.size(), cv::Size(60, 40));
  EXPECT_DOUBLE_EQ(sample.scale_x, 1.5);
  EXPECT_DOUBLE_EQ(sample.scale_y, 2.0);
  ASSERT_EQ(sample.texts.size(), 1u);
  EXPECT_EQ(sample.texts[0].polygon, Rect(15, 8, 12, 12));
}

}  // namespace
}  // namespace vision::data::augmentations
