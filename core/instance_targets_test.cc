#include "core/instance_targets.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/run_length_mask.h"

namespace vision::core {
namespace {

using ::testing::HasSubstr;

// A 6 x 8 image with a polygon square (label 2), an RLE blob (label 0) and a crowd region.
Sample MakeSample() {
  Sample sample;
  sample.image = cv::Mat(6, 8, CV_8UC3, cv::Scalar(0, 0, 0));
  ObjectInstance square;
  square.box = cv::Rect2f(1, 1, 3, 2);
  square.label = 2;
  square.polygons = {{{1, 1}, {4, 1}, {4, 3}, {1, 3}}};
  ObjectInstance blob;
  blob.box = cv::Rect2f(6, 5, 2, 1);
  blob.label = 0;
  cv::Mat blob_mask(6, 8, CV_8U, cv::Scalar(0));
  blob_mask.at<uint8_t>(5, 6) = blob_mask.at<uint8_t>(5, 7) = 1;
  blob.rle = EncodeRle(blob_mask);
  ObjectInstance crowd;
  crowd.box = cv::Rect2f(0, 4, 2, 2);
  crowd.label = 1;
  crowd.is_crowd = true;
  crowd.polygons = {{{0, 4}, {1, 4}, {1, 5}, {0, 5}}};
  sample.objects = {square, blob, crowd};
  return sample;
}

TEST(InstanceTargetsTest, BoxesLabelsAndMasksOfNonCrowdObjects) {
  absl::StatusOr<std::map<std::string, at::Tensor>> t = MakeInstanceTargets(MakeSample(), {});
  ASSERT_TRUE(t.ok()) << t.status();
  const at::Tensor boxes = t->at("boxes");
  ASSERT_EQ(boxes.sizes(), (std::vector<int64_t>{2, 4}));
  EXPECT_TRUE(at::equal(boxes, at::tensor({1.f, 1.f, 4.f, 3.f, 6.f, 5.f, 8.f, 6.f}).view({2, 4})));
  EXPECT_TRUE(at::equal(t->at("labels"), at::tensor({2, 0}, at::kLong)));
  EXPECT_TRUE(at::equal(t->at("is_crowd"), at::zeros({2}, at::kByte)));
  const at::Tensor masks = t->at("masks");
  ASSERT_EQ(masks.sizes(), (std::vector<int64_t>{2, 6, 8}));
  ASSERT_EQ(masks.scalar_type(), at::kByte);
  // The square's vertices lie on pixel centres: columns 1-4 of rows 1-3 are inside.
  at::Tensor square = at::zeros({6, 8}, at::kByte);
  square.slice(0, 1, 4).slice(1, 1, 5).fill_(1);
  EXPECT_TRUE(at::equal(masks[0], square)) << masks[0];
  at::Tensor blob = at::zeros({6, 8}, at::kByte);
  blob[5][6] = 1;
  blob[5][7] = 1;
  EXPECT_TRUE(at::equal(masks[1], blob)) << masks[1];
}

TEST(InstanceTargetsTest, CrowdKeptAndFlaggedWhenAsked) {
  InstanceTargetOptions options;
  options.crowd = true;
  options.masks = false;
  absl::StatusOr<std::map<std::string, at::Tensor>> t = MakeInstanceTargets(MakeSample(), options);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(at::equal(t->at("is_crowd"), at::tensor({0, 0, 1}, at::kByte)));
  EXPECT_TRUE(at::equal(t->at("labels"), at::tensor({2, 0, 1}, at::kLong)));
  EXPECT_EQ(t->count("masks"), 0u);
}

TEST(InstanceTargetsTest, NoObjectsGiveEmptyTensors) {
  Sample sample;
  sample.image = cv::Mat(4, 5, CV_8UC3);
  absl::StatusOr<std::map<std::string, at::Tensor>> t = MakeInstanceTargets(sample, {});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->at("boxes").sizes(), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(t->at("masks").sizes(), (std::vector<int64_t>{0, 4, 5}));
}

TEST(InstanceTargetsTest, RleOfAnotherSizeNamesTheAnnotation) {
  Sample sample = MakeSample();
  sample.objects[1].annotation_id = 7;
  sample.objects[1].rle = EncodeRle(cv::Mat(3, 3, CV_8U, cv::Scalar(1)));
  absl::StatusOr<std::map<std::string, at::Tensor>> t = MakeInstanceTargets(sample, {});
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("annotation 7: RLE mask is 3x3 but the image is 8x6"));
}

}  // namespace
}  // namespace vision::core
