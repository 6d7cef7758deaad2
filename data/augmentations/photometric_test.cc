// ColorJitter and Normalize: values checked by hand and by invariants of each component.
#include <cmath>
#include <memory>
#include <random>

#include "core/augmentation.h"
#include "core/sample.h"
#include "data/augmentations/augmentations.pb.h"
#include "data/augmentations/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::data::augmentations {
namespace {

using ::testing::HasSubstr;
using testing::MakeAugmentation;
using testing::Rect;

core::Sample RandomSample(uint64_t seed, int max_value = 256) {
  core::Sample sample;
  sample.id = "photo";
  sample.image = cv::Mat(12, 16, CV_8UC3);
  cv::RNG(seed).fill(sample.image, cv::RNG::UNIFORM, 0, max_value);
  sample.texts.push_back({Rect(1, 2, 3, 4), "x"});
  return sample;
}

std::unique_ptr<core::Augmentation> Make(const std::string& name,
                                         const google::protobuf::Message& options) {
  absl::StatusOr<std::unique_ptr<core::Augmentation>> made = MakeAugmentation(name, options);
  EXPECT_TRUE(made.ok()) << made.status();
  return made.ok() ? std::move(made).value() : nullptr;
}

TEST(NormalizeTest, MatchesHandComputedValues) {
  std::unique_ptr<core::Augmentation> normalize = Make("Normalize", NormalizeOptions());
  ASSERT_NE(normalize, nullptr);
  core::Sample sample = RandomSample(0);
  sample.image.at<cv::Vec3b>(3, 5) = cv::Vec3b(10, 20, 30);  // B, G, R
  std::mt19937_64 rng(0);
  ASSERT_TRUE(normalize->Apply(&sample, rng).ok());
  ASSERT_EQ(sample.image.type(), CV_32FC3);
  const cv::Vec3f pixel = sample.image.at<cv::Vec3f>(3, 5);  // R, G, B
  EXPECT_NEAR(pixel[0], (30 / 255.0 - 0.485) / 0.229, 1e-5);
  EXPECT_NEAR(pixel[1], (20 / 255.0 - 0.456) / 0.224, 1e-5);
  EXPECT_NEAR(pixel[2], (10 / 255.0 - 0.406) / 0.225, 1e-5);
}

TEST(NormalizeTest, CustomMeanStdInPixelUnits) {
  NormalizeOptions options;  // mmdet style: mean and std in 0..255
  for (float m : {123.675f, 116.28f, 103.53f}) options.add_mean(m);
  for (float s : {58.395f, 57.12f, 57.375f}) options.add_std(s);
  options.set_max_pixel_value(1);
  std::unique_ptr<core::Augmentation> normalize = Make("Normalize", options);
  ASSERT_NE(normalize, nullptr);
  core::Sample sample = RandomSample(0);
  sample.image.at<cv::Vec3b>(0, 0) = cv::Vec3b(200, 100, 0);
  std::mt19937_64 rng(0);
  ASSERT_TRUE(normalize->Apply(&sample, rng).ok());
  const cv::Vec3f pixel = sample.image.at<cv::Vec3f>(0, 0);
  EXPECT_NEAR(pixel[0], (0 - 123.675) / 58.395, 1e-5);
  EXPECT_NEAR(pixel[1], (100 - 116.28) / 57.12, 1e-5);
  EXPECT_NEAR(pixel[2], (200 - 103.53) / 57.375, 1e-5);
}

TEST(NormalizeTest, RejectsSecondApplicationAndBadOptions) {
  std::unique_ptr<core::Augmentation> normalize = Make("Normalize", NormalizeOptions());
  ASSERT_NE(normalize, nullptr);
  core::Sample sample = RandomSample(0);
  std::mt19937_64 rng(0);
  ASSERT_TRUE(normalize->Apply(&sample, rng).ok());
  EXPECT_THAT(normalize->Apply(&sample, rng).message(), HasSubstr("listed twice"));

  NormalizeOptions bad;
  bad.add_std(1);
  EXPECT_THAT(MakeAugmentation("Normalize", bad).status().message(), HasSubstr("3 values"));
  for (float s : {1.0f, 0.0f}) bad.add_std(s);
  EXPECT_THAT(MakeAugmentation("Normalize", bad).status().message(), HasSubstr("> 0"));
}

TEST(ColorJitterTest, ZeroRangesAreIdentity) {
  std::unique_ptr<core::Augmentation> jitter = Make("ColorJitter", ColorJitterOptions());
  ASSERT_NE(jitter, nullptr);
  for (uint64_t seed = 0; seed < 5; ++seed) {
    core::Sample sample = RandomSample(seed);
    const cv::Mat before = sample.image.clone();
    std::mt19937_64 rng(seed);
    ASSERT_TRUE(jitter->Apply(&sample, rng).ok());
    EXPECT_EQ(cv::norm(before, sample.image, cv::NORM_INF), 0);
    EXPECT_EQ(sample.texts[0].polygon, Rect(1, 2, 3, 4));
  }
}

TEST(ColorJitterTest, BrightnessScalesEveryPixelByOneFactor) {
  ColorJitterOptions options;
  options.set_brightness(0.5);
  std::unique_ptr<core::Augmentation> jitter = Make("ColorJitter", options);
  ASSERT_NE(jitter, nullptr);
  for (uint64_t seed = 0; seed < 5; ++seed) {
    core::Sample sample = RandomSample(seed, 101);  // <= 100: no clamping at factor <= 1.5
    sample.image.at<cv::Vec3b>(0, 0) = cv::Vec3b(100, 100, 100);
    const cv::Mat before = sample.image.clone();
    std::mt19937_64 rng(seed);
    ASSERT_TRUE(jitter->Apply(&sample, rng).ok());
    const double factor = sample.image.at<cv::Vec3b>(0, 0)[0] / 100.0;
    EXPECT_GE(factor, 0.5 - 0.005);
    EXPECT_LE(factor, 1.5 + 0.005);
    cv::Mat expected;
    before.convertTo(expected, CV_32F, factor);
    cv::Mat actual;
    sample.image.convertTo(actual, CV_32F);
    EXPECT_LE(cv::norm(expected, actual, cv::NORM_INF), 1.0);
  }
}

TEST(ColorJitterTest, SaturationAndHueLeaveGreyAlone) {
  ColorJitterOptions options;
  options.set_saturation(1);
  options.set_hue(0.5);
  std::unique_ptr<core::Augmentation> jitter = Make("ColorJitter", options);
  ASSERT_NE(jitter, nullptr);
  core::Sample sample = RandomSample(1);
  cv::Mat grey;
  cv::extractChannel(sample.image, grey, 0);
  cv::merge(std::vector<cv::Mat>{grey, grey, grey}, sample.image);
  const cv::Mat before = sample.image.clone();
  std::mt19937_64 rng(4);
  ASSERT_TRUE(jitter->Apply(&sample, rng).ok());
  EXPECT_LE(cv::norm(before, sample.image, cv::NORM_INF), 1);
}

TEST(ColorJitterTest, HueKeepsEachPixelsMaxAndMinChannel) {
  ColorJitterOptions options;
  options.set_hue(0.5);
  std::unique_ptr<core::Augmentation> jitter = Make("ColorJitter", options);
  ASSERT_NE(jitter, nullptr);
  int changed = 0;
  for (uint64_t seed = 0; seed < 4; ++seed) {
    core::Sample sample = RandomSample(seed);
    const cv::Mat before = sample.image.clone();
    std::mt19937_64 rng(seed);
    ASSERT_TRUE(jitter->Apply(&sample, rng).ok());
    for (int r = 0; r < before.rows; ++r) {
      for (int c = 0; c < before.cols; ++c) {
        const cv::Vec3b a = before.at<cv::Vec3b>(r, c), b = sample.image.at<cv::Vec3b>(r, c);
        EXPECT_NEAR(std::max({a[0], a[1], a[2]}), std::max({b[0], b[1], b[2]}), 1);
        EXPECT_NEAR(std::min({a[0], a[1], a[2]}), std::min({b[0], b[1], b[2]}), 1);
        changed += a != b;
      }
    }
  }
  EXPECT_GT(changed, 0);
}

TEST(ColorJitterTest, ContrastKeepsUniformImages) {
  ColorJitterOptions options;
  options.set_contrast(0.9);
  std::unique_ptr<core::Augmentation> jitter = Make("ColorJitter", options);
  ASSERT_NE(jitter, nullptr);
  core::Sample sample = RandomSample(0);
  sample.image.setTo(cv::Scalar::all(77));
  std::mt19937_64 rng(2);
  ASSERT_TRUE(jitter->Apply(&sample, rng).ok());
  EXPECT_LE(cv::norm(sample.image - cv::Scalar::all(77), cv::NORM_INF), 1);
}

TEST(ColorJitterTest, SameSeedSameOutput) {
  ColorJitterOptions options;
  options.set_brightness(0.3);
  options.set_contrast(0.3);
  options.set_saturation(0.3);
  options.set_hue(0.1);
  std::unique_ptr<core::Augmentation> jitter = Make("ColorJitter", options);
  ASSERT_NE(jitter, nullptr);
  core::Sample a = RandomSample(3), b = RandomSample(3);
  std::mt19937_64 rng_a(9), rng_b(9);
  ASSERT_TRUE(jitter->Apply(&a, rng_a).ok());
  ASSERT_TRUE(jitter->Apply(&b, rng_b).ok());
  EXPECT_EQ(cv::norm(a.image, b.image, cv::NORM_INF), 0);
  EXPECT_GT(cv::norm(a.image, RandomSample(3).image, cv::NORM_INF), 0);
}

TEST(ColorJitterTest, RejectsFloatImagesAndBadOptions) {
  ColorJitterOptions options;
  options.set_brightness(0.2);
  std::unique_ptr<core::Augmentation> jitter = Make("ColorJitter", options);
  ASSERT_NE(jitter, nullptr);
  core::Sample sample = RandomSample(0);
  sample.image.convertTo(sample.image, CV_32F);
  std::mt19937_64 rng(0);
  EXPECT_THAT(jitter->Apply(&sample, rng).message(), HasSubstr("before Normalize"));
  options.set_hue(0.6);
  EXPECT_FALSE(MakeAugmentation("ColorJitter", options).ok());
}

}  // namespace
}  // namespace vision::data::augmentations
