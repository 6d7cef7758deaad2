#include "models/dbnet/label_generator.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "core/polygon.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/dbnet/geometry.h"

namespace vision::models::dbnet {
namespace {

using ::testing::HasSubstr;

constexpr float kMin = 0.3f;
constexpr float kMax = 0.7f;

core::Sample MakeSample(int height, int width, std::vector<core::TextInstance> texts) {
  core::Sample sample;
  sample.id = "synthetic";
  sample.image = cv::Mat(height, width, CV_8UC3, cv::Scalar(0, 0, 0));
  sample.texts = std::move(texts);
  return sample;
}

core::TextInstance Text(core::Polygon polygon, bool ignore = false) {
  core::TextInstance text;
  text.polygon = std::move(polygon);
  text.ignore = ignore;
  return text;
}

// A map value as a float: "thresh_map" is CV_32F, the others CV_8U (checked in
// AxisAlignedSquare).
float At(const core::Sample& sample, const char* name, int x, int y) {
  const cv::Mat& map = sample.targets.at(name);
  return map.depth() == CV_8U ? map.at<uchar>(y, x) : map.at<float>(y, x);
}

// Threshold-map value at distance d from the nearest edge of a polygon with offset D.
float Expected(double d, double distance) {
  return kMin + (kMax - kMin) * static_cast<float>(1.0 - std::min(d / distance, 1.0));
}

TEST(LabelGeneratorTest, AxisAlignedSquare) {
  const core::Polygon square = {{10, 10}, {50, 10}, {50, 50}, {10, 50}};
  // D = A (1 - r^2) / L = 1600 * 0.84 / 160.
  const double d = 8.4;
  EXPECT_NEAR(ShrinkDistance(square, 0.4f), d, 1e-6);  // r = 0.4f is not exactly 0.4

  // A round-join shrink of a square is a square with sides 40 - 2 D = 23.2.
  const std::vector<core::Polygon> shrunk = OffsetPolygon(square, -d);
  ASSERT_EQ(shrunk.size(), 1u);
  EXPECT_NEAR(core::PolygonArea(shrunk[0]), 23.2 * 23.2, 0.5);

  core::Sample sample = MakeSample(64, 64, {Text(square)});
  ASSERT_TRUE(DBTargetGenerator(LabelGeneratorOptions()).Generate(&sample).ok());
  for (const char* name : {kGtTarget, kMaskTarget, kThreshMapTarget, kThreshMaskTarget}) {
    ASSERT_EQ(sample.targets.count(name), 1u) << name;
    EXPECT_EQ(sample.targets.at(name).type(),
              std::string(name) == kThreshMapTarget ? CV_32F : CV_8U)
        << name;
    EXPECT_EQ(sample.targets.at(name).size(), cv::Size(64, 64)) << name;
  }

  // gt: the shrunk square [18.4, 41.6]^2 drawn as cv::fillPoly does, boundary included at
  // the rounded vertex positions: pixels 18 to 42.
  EXPECT_EQ(cv::sum(sample.targets.at(kGtTarget))[0], 25 * 25);
  EXPECT_EQ(At(sample, kGtTarget, 30, 30), 1.0f);
  EXPECT_EQ(At(sample, kGtTarget, 18, 30), 1.0f);
  EXPECT_EQ(At(sample, kGtTarget, 42, 30), 1.0f);
  EXPECT_EQ(At(sample, kGtTarget, 17, 30), 0.0f);
  EXPECT_EQ(At(sample, kGtTarget, 43, 30), 0.0f);
  EXPECT_EQ(cv::sum(sample.targets.at(kMaskTarget))[0], 64 * 64);

  // On an edge: thresh_max; at distance >= D: thresh_min; in between linear in distance,
  // inside and outside alike.
  EXPECT_FLOAT_EQ(At(sample, kThreshMapTarget, 10, 30), kMax);
  EXPECT_FLOAT_EQ(At(sample, kThreshMapTarget, 30, 50), kMax);
  EXPECT_FLOAT_EQ(At(sample, kThreshMapTarget, 30, 30), kMin);
  EXPECT_FLOAT_EQ(At(sample, kThreshMapTarget, 14, 30), Expected(4, d));
  EXPECT_FLOAT_EQ(At(sample, kThreshMapTarget, 6, 30), Expected(4, d));
  EXPECT_FLOAT_EQ(At(sample, kThreshMapTarget, 2, 30), Expected(8, d));
  EXPECT_FLOAT_EQ(At(sample, kThreshMapTarget, 1, 30), kMin);
  // Near a corner the distance is to the vertex (round join): sqrt(50) at (5, 5).
  EXPECT_FLOAT_EQ(At(sample, kThreshMapTarget, 5, 5), Expected(std::sqrt(50.0), d));

  // thresh_mask: the square dilated by D with round corners.
  EXPECT_EQ(At(sample, kThreshMaskTarget, 30, 30), 1.0f);
  EXPECT_EQ(At(sample, kThreshMaskTarget, 2, 30), 1.0f);
  EXPECT_EQ(At(sample, kThreshMaskTarget, 1, 30), 0.0f);
  EXPECT_EQ(At(sample, kThreshMaskTarget, 5, 5), 1.0f);
  EXPECT_EQ(At(sample, kThreshMaskTarget, 4, 4), 0.0f);  // sqrt(72) > 8.4
  EXPECT_EQ(At(sample, kThreshMaskTarget, 58, 30), 1.0f);
  EXPECT_EQ(At(sample, kThreshMaskTarget, 59, 30), 0.0f);
}

// A 50 x 20 rectangle along (3, 4) / 5 centred at (50, 50): integer corners, and the points
// centre + t (-4, 3) / 5 for t a multiple of 5 are pixels at distance |10 - t| from a long
// edge.
TEST(LabelGeneratorTest, RotatedRectangle) {
  const core::Polygon rectangle = {{57, 76}, {27, 36}, {43, 24}, {73, 64}};
  // D = 1000 * 0.84 / 140.
  const double d = 6.0;
  EXPECT_NEAR(core::PolygonArea(rectangle), 1000.0, 1e-6);
  EXPECT_NEAR(ShrinkDistance(rectangle, 0.4f), d, 1e-6);
  const std::vector<core::Polygon> shrunk = OffsetPolygon(rectangle, -d);
  ASSERT_EQ(shrunk.size(), 1u);
  EXPECT_NEAR(core::PolygonArea(shrunk[0]), (50 - 2 * d) * (20 - 2 * d), 1.0);

  core::Sample sample = MakeSample(100, 100, {Text(rectangle)});
  ASSERT_TRUE(DBTargetGenerator(LabelGeneratorOptions()).Generate(&sample).ok());
  // The 38 x 8 shrunk rectangle (area 304, perimeter 92) with its boundary pixels.
  const double gt_pixels = cv::sum(sample.targets.at(kGtTarget))[0];
  EXPECT_GE(gt_pixels, 304.0);
  EXPECT_LE(gt_pixels, 304.0 + 92.0);
  EXPECT_EQ(At(sample, kGtTarget, 50, 50), 1.0f);
  EXPECT_EQ(At(sample, kGtTarget, 53, 54), 1.0f);  // centre + (3, 4): 10 from the long edges
  EXPECT_EQ(At(sample, kGtTarget, 46, 53), 0.0f);  // 5 < D from a long edge

  EXPECT_FLOAT_EQ(At(sample, kThreshMapTarget, 50, 50), kMin);            // t = 0
  EXPECT_FLOAT_EQ(At(sample, kThreshMapTarget, 46, 53), Expected(5, d));  // t = 5
  EXPECT_FLOAT_EQ(At(sample, kThreshMapTarget, 42, 56), kMax);            // t = 10: on the edge
  EXPECT_FLOAT_EQ(At(sample, kThreshMapTarget, 38, 59), Expected(5, d));  // t = 15: outside
  EXPECT_FLOAT_EQ(At(sample, kThreshMapTarget, 34, 62), kMin);            // t = 20
  EXPECT_FLOAT_EQ(At(sample, kThreshMapTarget, 65, 70), kMax);  // middle of the other edge
  EXPECT_EQ(At(sample, kThreshMaskTarget, 50, 50), 1.0f);
  EXPECT_EQ(At(sample, kThreshMaskTarget, 38, 59), 1.0f);
  EXPECT_EQ(At(sample, kThreshMaskTarget, 34, 62), 0.0f);
}

TEST(LabelGeneratorTest, DontCareAndTooSmallPolygonsOnlyClearTheMask) {
  const core::Polygon dont_care = {{5, 5}, {25, 5}, {25, 25}, {5, 25}};
  const core::Polygon thin = {{40, 40}, {60, 40}, {60, 45}, {40, 45}};  // 5 < 8 px high
  core::Sample sample = MakeSample(64, 64, {Text(dont_care, /*ignore=*/true), Text(thin)});
  ASSERT_TRUE(DBTargetGenerator(LabelGeneratorOptions()).Generate(&sample).ok());
  const cv::Mat& mask = sample.targets.at(kMaskTarget);
  EXPECT_EQ(mask.at<uchar>(15, 15), 0);
  EXPECT_EQ(mask.at<uchar>(5, 5), 0);
  EXPECT_EQ(mask.at<uchar>(42, 50), 0);
  EXPECT_EQ(mask.at<uchar>(30, 30), 1);
  EXPECT_EQ(mask.at<uchar>(3, 3), 1);
  EXPECT_EQ(mask.at<uchar>(47, 50), 1);
  // Both regions filled, boundaries included: 21 x 21 + 21 x 6 pixels.
  EXPECT_EQ(cv::sum(mask)[0], 64 * 64 - 21 * 21 - 21 * 6);
  EXPECT_EQ(cv::countNonZero(sample.targets.at(kGtTarget)), 0);
  EXPECT_EQ(cv::countNonZero(sample.targets.at(kThreshMaskTarget)), 0);
  EXPECT_EQ(cv::countNonZero(sample.targets.at(kThreshMapTarget) != kMin), 0);

  // The same thin polygon counts with a lower min_text_size.
  LabelGeneratorOptions options;
  options.min_text_size = 4;
  core::Sample kept = MakeSample(64, 64, {Text(thin)});
  ASSERT_TRUE(DBTargetGenerator(options).Generate(&kept).ok());
  EXPECT_EQ(cv::sum(kept.targets.at(kMaskTarget))[0], 64 * 64);
  EXPECT_GT(cv::countNonZero(kept.targets.at(kGtTarget)), 0);
}

TEST(LabelGeneratorTest, OverlappingPolygonsTakeTheMaximum) {
  const core::Polygon a = {{10, 10}, {40, 10}, {40, 30}, {10, 30}};
  const core::Polygon b = {{35, 20}, {60, 28}, {55, 45}, {30, 37}};
  const DBTargetGenerator generator{LabelGeneratorOptions()};
  core::Sample only_a = MakeSample(64, 64, {Text(a)});
  core::Sample only_b = MakeSample(64, 64, {Text(b)});
  core::Sample both = MakeSample(64, 64, {Text(a), Text(b)});
  ASSERT_TRUE(generator.Generate(&only_a).ok());
  ASSERT_TRUE(generator.Generate(&only_b).ok());
  ASSERT_TRUE(generator.Generate(&both).ok());
  for (const char* name : {kGtTarget, kThreshMapTarget, kThreshMaskTarget}) {
    cv::Mat expected = cv::max(only_a.targets.at(name), only_b.targets.at(name));
    EXPECT_EQ(cv::norm(both.targets.at(name), expected, cv::NORM_INF), 0.0) << name;
  }
}

TEST(LabelGeneratorTest, PolygonsAreClippedToTheImage) {
  // Half outside: the clipped square is [0, 20] x [10, 40].
  const core::Polygon square = {{-20, 10}, {20, 10}, {20, 40}, {-20, 40}};
  core::Sample sample = MakeSample(64, 64, {Text(square)});
  ASSERT_TRUE(DBTargetGenerator(LabelGeneratorOptions()).Generate(&sample).ok());
  const double d = ShrinkDistance({{0, 10}, {20, 10}, {20, 40}, {0, 40}}, 0.4f);
  EXPECT_FLOAT_EQ(At(sample, kThreshMapTarget, 0, 25), kMax);
  EXPECT_FLOAT_EQ(At(sample, kThreshMapTarget, 3, 25), Expected(3, d));
  EXPECT_EQ(At(sample, kGtTarget, 10, 25), 1.0f);
}

// Distance from (x, y) to segment ab, in double precision.
double SegmentDistance(double x, double y, const cv::Point2f& a, const cv::Point2f& b) {
  const double dx = b.x - a.x, dy = b.y - a.y;
  const double length2 = dx * dx + dy * dy;
  double t = length2 > 0 ? ((x - a.x) * dx + (y - a.y) * dy) / length2 : 0.0;
  t = std::min(std::max(t, 0.0), 1.0);
  return std::hypot(x - a.x - t * dx, y - a.y - t * dy);
}

// The fast generator visits only rows spans near each edge; this compares it with the
// definition evaluated at every pixel of the image for every edge, on random quadrilaterals
// and a concave polygon.
TEST(LabelGeneratorTest, ThresholdMapMatchesBruteForce) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> center(10.0f, 90.0f);
  std::uniform_real_distribution<float> length(15.0f, 60.0f);
  std::uniform_real_distribution<float> thickness(9.0f, 25.0f);
  std::uniform_real_distribution<float> angle(-90.0f, 90.0f);
  std::vector<core::TextInstance> texts;
  for (int i = 0; i < 6; ++i) {
    const cv::RotatedRect rect({center(rng), center(rng)}, {length(rng), thickness(rng)},
                               angle(rng));
    cv::Point2f corners[4];
    rect.points(corners);
    texts.push_back(Text(core::Polygon(corners, corners + 4)));
  }
  texts.push_back(Text(
      {{20, 60}, {80, 60}, {80, 95}, {65, 95}, {65, 75}, {35, 75}, {35, 95}, {20, 95}}));  // a U
                                                                                           // shape
  core::Sample sample = MakeSample(100, 100, texts);
  const LabelGeneratorOptions options;
  ASSERT_TRUE(DBTargetGenerator(options).Generate(&sample).ok());

  int checked_inside_band = 0;
  for (int y = 0; y < 100; ++y) {
    for (int x = 0; x < 100; ++x) {
      double expected = kMin;
      bool near_any = false, ambiguous = false;
      for (const core::TextInstance& text : sample.texts) {
        core::Polygon polygon = text.polygon;
        for (cv::Point2f& p : polygon) {
          p.x = std::min(std::max(p.x, 0.0f), 99.0f);
          p.y = std::min(std::max(p.y, 0.0f), 99.0f);
        }
        const double d = ShrinkDistance(polygon, options.shrink_ratio);
        double nearest = 1e9;
        for (size_t i = 0; i < polygon.size(); ++i) {
          nearest = std::min(nearest,
                             SegmentDistance(x, y, polygon[i], polygon[(i + 1) % polygon.size()]));
        }
        expected = std::max(expected, static_cast<double>(Expected(nearest, d)));
        near_any = near_any || nearest < d - 1e-3;
        ambiguous = ambiguous || std::abs(nearest - d) <= 1e-3;
      }
      ASSERT_NEAR(At(sample, kThreshMapTarget, x, y), expected, 1e-5) << x << ", " << y;
      if (near_any) {
        ++checked_inside_band;
        ASSERT_EQ(At(sample, kThreshMaskTarget, x, y), 1.0f) << x << ", " << y;
      }
    }
  }
  EXPECT_GT(checked_inside_band, 1000);
}

TEST(LabelGeneratorTest, ErrorsNameTheSampleAndText) {
  core::Sample degenerate = MakeSample(32, 32, {Text({{1, 1}, {5, 5}})});
  const absl::Status status = DBTargetGenerator(LabelGeneratorOptions()).Generate(&degenerate);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("sample 'synthetic', text 0"));

  core::Sample empty;
  empty.id = "no_image";
  EXPECT_THAT(DBTargetGenerator(LabelGeneratorOptions()).Generate(&empty).message(),
              HasSubstr("'no_image': the image is empty"));
}

}  // namespace
}  // namespace vision::models::dbnet
