// Exact results of the geometric plugins on hand-made cases: output sizes, scale factors,
// pixel layout and polygon coordinates.
#include <set>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <opencv2/core.hpp>

#include "core/augmentation.h"
#include "core/sample.h"
#include "core/status_macros.h"
#include "data/augmentations/augmentations.pb.h"
#include "data/augmentations/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::data::augmentations {
namespace {

using ::testing::IsSupersetOf;
using testing::MakeAugmentation;
using testing::Rect;

core::Sample MakeSample(int width, int height) {
  core::Sample sample;
  sample.id = "plugins";
  sample.image = cv::Mat(height, width, CV_8UC3);
  cv::RNG(1).fill(sample.image, cv::RNG::UNIFORM, 0, 256);
  sample.texts.push_back({Rect(10, 4, 8, 6), "a"});
  return sample;
}

// Applies `name` with `options` to `sample` using seed 0.
absl::Status Apply(const std::string& name, const google::protobuf::Message& options,
                   core::Sample* sample, uint64_t seed = 0) {
  VISION_ASSIGN_OR_RETURN(std::unique_ptr<core::Augmentation> made,
                          MakeAugmentation(name, options));
  std::mt19937_64 rng(seed);
  return made->Apply(sample, rng);
}

TEST(RegistrationTest, EveryAugmentationIsRegistered) {
  EXPECT_THAT(core::AugmentationRegistry::Get().Names(),
              IsSupersetOf({"ColorJitter", "HorizontalFlip", "Normalize", "PadToDivisor",
                            "RandomCrop", "RandomRotate", "RandomScale", "Resize"}));
}

struct ResizeCase {
  ResizeOptions::Mode mode;
  int size, max_size, width, height, multiple;
  cv::Size expected;
};

TEST(ResizeTest, ModesGiveExpectedSizesAndScales) {
  const ResizeCase cases[] = {
      {ResizeOptions::SHORTER_SIDE, 90, 0, 0, 0, 1, {120, 90}},
      {ResizeOptions::SHORTER_SIDE, 90, 100, 0, 0, 1, {100, 75}},  // longer side capped
      {ResizeOptions::LONGER_SIDE, 80, 0, 0, 0, 1, {80, 60}},
      {ResizeOptions::FIT, 0, 0, 100, 100, 1, {100, 75}},
      {ResizeOptions::FIT, 0, 0, 400, 60, 1, {80, 60}},
      {ResizeOptions::EXACT, 0, 0, 50, 70, 1, {50, 70}},
      // 160x120 -> shorter side 100 gives 133.3x100, rounded to multiples of 32.
      {ResizeOptions::SHORTER_SIDE, 100, 0, 0, 0, 32, {128, 96}},
  };
  for (const ResizeCase& c : cases) {
    ResizeOptions options;
    options.set_mode(c.mode);
    options.set_size(c.size);
    options.set_max_size(c.max_size);
    options.set_width(c.width);
    options.set_height(c.height);
    options.set_round_to_multiple(c.multiple);
    core::Sample sample = MakeSample(160, 120);
    ASSERT_TRUE(Apply("Resize", options, &sample).ok());
    EXPECT_EQ(sample.image.size(), c.expected) << ResizeOptions::Mode_Name(c.mode);
    const double sx = c.expected.width / 160.0, sy = c.expected.height / 120.0;
    EXPECT_DOUBLE_EQ(sample.scale_x, sx);
    EXPECT_DOUBLE_EQ(sample.scale_y, sy);
    EXPECT_NEAR(sample.texts[0].polygon[2].x, 18 * sx, 1e-4);
    EXPECT_NEAR(sample.texts[0].polygon[2].y, 10 * sy, 1e-4);
  }
}

TEST(ResizeTest, FloorRoundingIsTorchvisionsSizeRule) {
  // GeneralizedRCNNTransform at (800, 1333): scale = min(800 / 480, 1333 / 640), each side
  // floor(side * scale): 640x480 -> 1066x800 (nearest: 1067x800); 480x640 -> 800x1066.
  ResizeOptions options;
  options.set_mode(ResizeOptions::SHORTER_SIDE);
  options.set_size(800);
  options.set_max_size(1333);
  const std::vector<std::pair<ResizeOptions::Rounding, int>> cases = {
      {ResizeOptions::FLOOR, 1066}, {ResizeOptions::ROUND, 1067}};
  for (const auto& [rounding, width] : cases) {
    options.set_rounding(rounding);
    core::Sample landscape = MakeSample(640, 480);
    ASSERT_TRUE(Apply("Resize", options, &landscape).ok());
    EXPECT_EQ(landscape.image.size(), cv::Size(width, 800)) << ResizeOptions::Rounding_Name(rounding);
    core::Sample portrait = MakeSample(480, 640);
    ASSERT_TRUE(Apply("Resize", options, &portrait).ok());
    EXPECT_EQ(portrait.image.size(), cv::Size(800, width)) << ResizeOptions::Rounding_Name(rounding);
  }
  // max_size decides: 1000x300 -> scale min(800 / 300, 1333 / 1000) = 1.333 -> 1333x399.9 -> 399.
  options.set_rounding(ResizeOptions::FLOOR);
  core::Sample wide = MakeSample(1000, 300);
  ASSERT_TRUE(Apply("Resize", options, &wide).ok());
  EXPECT_EQ(wide.image.size(), cv::Size(1333, 399));
}

TEST(ResizeTest, SizeChoicesDrawEverySizeAndOnlyThose) {
  ResizeOptions options;
  options.set_mode(ResizeOptions::SHORTER_SIDE);
  options.add_size_choices(60);
  options.add_size_choices(90);
  options.add_size_choices(180);
  options.set_max_size(200);
  std::set<int> heights;
  for (uint64_t seed = 0; seed < 30; ++seed) {
    core::Sample sample = MakeSample(160, 120);
    ASSERT_TRUE(Apply("Resize", options, &sample, seed).ok());
    heights.insert(sample.image.rows);
    // 180 is capped by max_size: 160x120 -> 240x180 -> 200x150.
    const int expected_width = sample.image.rows == 150 ? 200 : sample.image.rows * 4 / 3;
    EXPECT_EQ(sample.image.cols, expected_width);
  }
  EXPECT_EQ(heights, (std::set<int>{60, 90, 150}));
  options.set_mode(ResizeOptions::FIT);
  options.set_width(10);
  options.set_height(10);
  EXPECT_FALSE(MakeAugmentation("Resize", options).ok());
}

TEST(ResizeTest, RejectsMissingSizes) {
  ResizeOptions options;
  options.set_mode(ResizeOptions::FIT);
  EXPECT_FALSE(MakeAugmentation("Resize", options).ok());
  options.set_mode(ResizeOptions::SHORTER_SIDE);
  options.set_size(-3);
  EXPECT_FALSE(MakeAugmentation("Resize", options).ok());
}

TEST(RandomScaleTest, ScalesWithinRangeKeepingAspectAndComposesScaleFactors) {
  RandomScaleOptions options;
  options.set_min_scale(0.5);
  options.set_max_scale(3.0);
  double smallest = 10, largest = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    core::Sample sample = MakeSample(40, 30);
    sample.scale_x = sample.scale_y = 0.5;  // an earlier resize
    ASSERT_TRUE(Apply("RandomScale", options, &sample, seed).ok());
    const double s = sample.image.cols / 40.0;
    EXPECT_GE(s, 0.5 - 1 / 40.0);
    EXPECT_LE(s, 3.0 + 1 / 40.0);
    EXPECT_NEAR(sample.image.rows, 30 * s, 1.0);
    EXPECT_DOUBLE_EQ(sample.scale_x, 0.5 * sample.image.cols / 40.0);
    EXPECT_DOUBLE_EQ(sample.scale_y, 0.5 * sample.image.rows / 30.0);
    smallest = std::min(smallest, s);
    largest = std::max(largest, s);
  }
  // Draws spread over the range rather than sticking to one value.
  EXPECT_LT(smallest, 1.0);
  EXPECT_GT(largest, 2.0);
}

TEST(PadToDivisorTest, PadsBottomRightWithFill) {
  PadToDivisorOptions options;
  options.set_divisor(32);
  for (float v : {1.0f, 2.0f, 3.0f}) options.add_image_fill(v);
  core::Sample sample = MakeSample(100, 70);
  sample.semantic = cv::Mat(70, 100, CV_8U, cv::Scalar(4));
  const cv::Mat before = sample.image.clone();
  ASSERT_TRUE(Apply("PadToDivisor", options, &sample).ok());
  ASSERT_EQ(sample.image.size(), cv::Size(128, 96));
  EXPECT_EQ(cv::norm(sample.image(cv::Rect(0, 0, 100, 70)), before, cv::NORM_INF), 0);
  EXPECT_EQ(sample.image.at<cv::Vec3b>(95, 127), cv::Vec3b(1, 2, 3));
  EXPECT_EQ(sample.semantic.at<uint8_t>(95, 127), 255);
  EXPECT_EQ(sample.semantic.at<uint8_t>(69, 99), 4);
  EXPECT_EQ(sample.texts[0].polygon, Rect(10, 4, 8, 6));
  EXPECT_EQ(sample.scale_x, 1.0);

  // The picture's size is kept for Batch::image_sizes.
  EXPECT_EQ(sample.size_before_padding, cv::Size(100, 70));

  core::Sample aligned = MakeSample(64, 32);
  ASSERT_TRUE(Apply("PadToDivisor", options, &aligned).ok());
  EXPECT_EQ(aligned.image.size(), cv::Size(64, 32));
  EXPECT_TRUE(aligned.size_before_padding.empty());

  // A geometric augmentation after the padding makes the whole image the picture again.
  HorizontalFlipOptions flip;
  flip.set_probability(1);
  ASSERT_TRUE(Apply("HorizontalFlip", flip, &sample).ok());
  EXPECT_TRUE(sample.size_before_padding.empty());
}

TEST(HorizontalFlipTest, MirrorsPixelsAndPolygonsOrNothing) {
  HorizontalFlipOptions options;
  options.set_probability(1);
  core::Sample sample = MakeSample(40, 20);
  cv::Mat expected;
  cv::flip(sample.image, expected, 1);
  ASSERT_TRUE(Apply("HorizontalFlip", options, &sample).ok());
  EXPECT_EQ(cv::norm(sample.image, expected, cv::NORM_INF), 0);
  EXPECT_EQ(sample.texts[0].polygon, Rect(22, 4, 8, 6));

  options.set_probability(0);
  core::Sample unflipped = MakeSample(40, 20);
  const cv::Mat before = unflipped.image.clone();
  ASSERT_TRUE(Apply("HorizontalFlip", options, &unflipped).ok());
  EXPECT_EQ(cv::norm(unflipped.image, before, cv::NORM_INF), 0);
}

TEST(RandomRotateTest, QuarterTurnWithExpandMatchesCvRotate) {
  RandomRotateOptions options;
  options.set_min_angle(90);
  options.set_max_angle(90);
  options.set_expand(true);
  core::Sample sample = MakeSample(40, 20);
  cv::Mat expected;
  cv::rotate(sample.image, expected, cv::ROTATE_90_COUNTERCLOCKWISE);
  ASSERT_TRUE(Apply("RandomRotate", options, &sample).ok());
  ASSERT_EQ(sample.image.size(), cv::Size(20, 40));
  EXPECT_LE(cv::norm(sample.image, expected, cv::NORM_INF), 1);
  // Counter-clockwise: (x, y) -> (y, W - x) with W = 40.
  ASSERT_EQ(sample.texts.size(), 1u);
  const core::Polygon& p = sample.texts[0].polygon;
  EXPECT_NEAR(p[0].x, 4, 1e-4);
  EXPECT_NEAR(p[0].y, 30, 1e-4);
  EXPECT_NEAR(p[2].x, 10, 1e-4);
  EXPECT_NEAR(p[2].y, 22, 1e-4);
}

TEST(RandomRotateTest, KeepSizeClipsCornersAndZeroAngleIsIdentity) {
  RandomRotateOptions options;
  options.set_min_angle(45);
  options.set_max_angle(45);
  core::Sample sample = MakeSample(40, 20);
  sample.texts = {{Rect(34, 0, 6, 4), "corner"}};
  ASSERT_TRUE(Apply("RandomRotate", options, &sample).ok());
  EXPECT_EQ(sample.image.size(), cv::Size(40, 20));
  EXPECT_TRUE(sample.texts.empty());  // the top-right corner turns above the canvas

  options.set_min_angle(0);
  options.set_max_angle(0);
  core::Sample still = MakeSample(40, 20);
  const cv::Mat before = still.image.clone();
  ASSERT_TRUE(Apply("RandomRotate", options, &still).ok());
  EXPECT_EQ(cv::norm(still.image, before, cv::NORM_INF), 0);
  EXPECT_EQ(still.texts[0].polygon, Rect(10, 4, 8, 6));
}

}  // namespace
}  // namespace vision::data::augmentations
