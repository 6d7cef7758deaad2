#include "models/dbnet/post_processor.h"

#include <array>
#include <cmath>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include "gtest/gtest.h"

namespace vision::models::dbnet {
namespace {

// Draws the rectangle on `map` with `value` (what a trained network outputs: the shrunk
// text region) and returns the quadrilateral post-processing should recover: the same
// rectangle grown on every side by d = area * unclip_ratio / perimeter.
std::array<cv::Point2f, 4> DrawAndExpect(const cv::RotatedRect& drawn, float value,
                                         float unclip_ratio, cv::Mat* map) {
  std::array<cv::Point2f, 4> corners;
  drawn.points(corners.data());
  std::vector<cv::Point> polygon;
  for (const cv::Point2f& p : corners) polygon.emplace_back(cvRound(p.x), cvRound(p.y));
  cv::fillPoly(*map, std::vector<std::vector<cv::Point>>{polygon}, cv::Scalar(value));
  const float w = drawn.size.width, h = drawn.size.height;
  const float d = w * h * unclip_ratio / (2 * (w + h));
  cv::RotatedRect expected(drawn.center, cv::Size2f(w + 2 * d, h + 2 * d), drawn.angle);
  expected.points(corners.data());
  return corners;
}

// Every expected corner has a corner of `polygon` within `tolerance` pixels.
bool CornersMatch(const core::Polygon& polygon, const std::array<cv::Point2f, 4>& expected,
                  float tolerance) {
  if (polygon.size() != 4) return false;
  for (const cv::Point2f& e : expected) {
    float best = 1e9f;
    for (const cv::Point2f& p : polygon) best = std::min(best, static_cast<float>(cv::norm(p - e)));
    if (best > tolerance) return false;
  }
  return true;
}

class PostProcessorTest : public ::testing::Test {
 protected:
  PostProcessorTest() : map_(128, 160, CV_32F, cv::Scalar(0.05)) {
    first_ = DrawAndExpect(cv::RotatedRect({40, 40}, {40, 12}, 30), 0.9f, 1.5f, &map_);
    second_ = DrawAndExpect(cv::RotatedRect({110, 90}, {30, 10}, -20), 0.8f, 1.5f, &map_);
    // Above binary_threshold but its mean (0.5) is below box_threshold: dropped.
    DrawAndExpect(cv::RotatedRect({120, 25}, {30, 12}, 0), 0.5f, 1.5f, &map_);
  }

  cv::Mat map_;
  std::array<cv::Point2f, 4> first_;
  std::array<cv::Point2f, 4> second_;
};

TEST_F(PostProcessorTest, RecoversTwoRotatedRectangles) {
  const std::vector<core::TextInstance> regions =
      ExtractTextRegions(map_, PostProcessorOptions(), 1.0, 1.0, 160, 128);
  ASSERT_EQ(regions.size(), 2u);
  int found_first = 0, found_second = 0;
  for (const core::TextInstance& region : regions) {
    if (CornersMatch(region.polygon, first_, 2.0f)) {
      ++found_first;
      EXPECT_NEAR(region.score, 0.9f, 1e-4);
    }
    if (CornersMatch(region.polygon, second_, 2.0f)) {
      ++found_second;
      EXPECT_NEAR(region.score, 0.8f, 1e-4);
    }
    // Clockwise from the top-left in image coordinates: positive shoelace sum (y down).
    double twice_area = 0;
    for (size_t i = 0; i < 4; ++i) {
      const cv::Point2f& a = region.polygon[i];
      const cv::Point2f& b = region.polygon[(i + 1) % 4];
      twice_area += a.x * b.y - b.x * a.y;
    }
    EXPECT_GT(twice_area, 0);
  }
  EXPECT_EQ(found_first, 1);
  EXPECT_EQ(found_second, 1);
}

TEST_F(PostProcessorTest, MapsBackToTheOriginalImageAndClips) {
  // The map is the original scaled by (2, 0.5); an original of 60 x 200 cuts the second box
  // (x up to ~66, y up to ~210 in original pixels), which is clipped to the image.
  const std::vector<core::TextInstance> scaled =
      ExtractTextRegions(map_, PostProcessorOptions(), 2.0, 0.5, 60, 200);
  const std::vector<core::TextInstance> unscaled =
      ExtractTextRegions(map_, PostProcessorOptions(), 1.0, 1.0, 1000, 1000);
  ASSERT_EQ(scaled.size(), 2u);
  ASSERT_EQ(unscaled.size(), 2u);
  bool clipped = false;
  for (size_t r = 0; r < scaled.size(); ++r) {
    ASSERT_EQ(scaled[r].polygon.size(), unscaled[r].polygon.size());
    for (size_t i = 0; i < scaled[r].polygon.size(); ++i) {
      const float x = unscaled[r].polygon[i].x / 2.0f;
      const float y = unscaled[r].polygon[i].y * 2.0f;
      clipped = clipped || x > 59.0f || y > 199.0f;
      EXPECT_FLOAT_EQ(scaled[r].polygon[i].x, std::min(x, 59.0f));
      EXPECT_FLOAT_EQ(scaled[r].polygon[i].y, std::min(y, 199.0f));
    }
  }
  EXPECT_TRUE(clipped);
}

TEST_F(PostProcessorTest, PolygonOutputIsTheExpandedRegion) {
  PostProcessorOptions options;
  options.output = OutputShape::kPolygon;
  const std::vector<core::TextInstance> regions =
      ExtractTextRegions(map_, options, 1.0, 1.0, 160, 128);
  ASSERT_EQ(regions.size(), 2u);
  for (const core::TextInstance& region : regions) {
    EXPECT_GT(region.polygon.size(), 4u);  // round joins at the corners
    // A rectangle w x h grown by d with round joins has area w h + 2 d (w + h) + pi d^2;
    // allow for the one-pixel-smaller contour of a drawn region.
    const double area = std::abs(cv::contourArea(region.polygon));
    const bool first = region.score > 0.85f;
    const double w = first ? 40 : 30, h = first ? 12 : 10;
    const double d = w * h * 1.5 / (2 * (w + h));
    EXPECT_NEAR(area, w * h + 2 * d * (w + h) + M_PI * d * d, 0.1 * w * h + 2 * (w + h));
  }
}

TEST_F(PostProcessorTest, ThresholdsAndCandidateLimit) {
  PostProcessorOptions options;
  options.box_threshold = 0.85f;  // keeps only the 0.9 rectangle
  EXPECT_EQ(ExtractTextRegions(map_, options, 1.0, 1.0, 160, 128).size(), 1u);
  options.box_threshold = 0.4f;  // keeps the 0.5 one too
  EXPECT_EQ(ExtractTextRegions(map_, options, 1.0, 1.0, 160, 128).size(), 3u);
  options.max_candidates = 1;
  EXPECT_EQ(ExtractTextRegions(map_, options, 1.0, 1.0, 160, 128).size(), 1u);
  options.max_candidates = 1000;
  options.binary_threshold = 0.95f;  // nothing is text
  EXPECT_TRUE(ExtractTextRegions(map_, options, 1.0, 1.0, 160, 128).empty());
}

TEST(PostProcessorSmallTest, DropsRegionsThinnerThanMinBoxSize) {
  cv::Mat map(64, 64, CV_32F, cv::Scalar(0));
  // 3 pixels high: a contour 2 px high (between the outer pixel centres), below the default
  // minimum of 3.
  cv::rectangle(map, cv::Rect(10, 10, 30, 3), cv::Scalar(0.9), cv::FILLED);
  EXPECT_TRUE(ExtractTextRegions(map, PostProcessorOptions(), 1.0, 1.0, 64, 64).empty());
  PostProcessorOptions options;
  options.min_box_size = 1.0f;
  EXPECT_EQ(ExtractTextRegions(map, options, 1.0, 1.0, 64, 64).size(), 1u);
}

}  // namespace
}  // namespace vision::models::dbnet
