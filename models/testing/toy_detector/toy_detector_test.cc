#include "models/testing/toy_detector/toy_detector.h"

#include <cmath>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "core/batch.h"
#include "core/run_length_mask.h"
#include "gtest/gtest.h"
#include "models/testing/train_for_test.h"

namespace vision::models::testing {
namespace {

TEST(ToyDetectorTest, PixelTargetsPaintMasksWithLabelsAndIgnorePadding) {
  core::Batch batch;
  batch.images = at::zeros({2, 3, 3, 4});
  batch.image_sizes = at::tensor({3, 4, 2, 2}, at::kLong).view({2, 2});
  batch.samples.resize(2);
  at::Tensor mask = at::zeros({1, 3, 4}, at::kByte);
  mask[0][1][2] = 1;
  batch.instances = {{{"masks", mask}, {"labels", at::tensor({3}, at::kLong)}},
                     {{"masks", at::zeros({0, 2, 2}, at::kByte)}, {"labels", at::zeros({0}, at::kLong)}}};
  const at::Tensor target = ToyDetector::PixelTargets(batch);
  at::Tensor expected = at::zeros({2, 3, 4}, at::kLong);
  expected[0][1][2] = 4;  // label 3 -> pixel class 4
  expected[1].slice(0, 2).fill_(core::kIgnoreLabel);
  expected[1].slice(1, 2).fill_(core::kIgnoreLabel);
  EXPECT_TRUE(at::equal(target, expected)) << target;
}

// The instance path of the core contract, end to end: the COCO plugin's objects become boxes,
// labels and masks in the loader's workers (Batch::instances) and the model trains two steps
// through the real trainer.
TEST(ToyDetectorTest, TrainsTwoStepsThroughTheLoaderAndTrainer) {
  const std::vector<double> losses =
      TrainAndReadLoss("models/testing/toy_detector/configs/coco_two_steps.pbtxt", 2, "pixel_ce");
  ASSERT_EQ(losses.size(), 2u);
  for (double value : losses) EXPECT_TRUE(std::isfinite(value) && value > 0.1 && value < 10) << value;
}

TEST(ToyDetectorTest, PredictsOneObjectPerRegionWithBoxAndMaskInOriginalPixels) {
  ToyDetectorOptions options;
  options.set_num_classes(2);
  auto model = ToyDetector::Create(options);
  ASSERT_TRUE(model.ok()) << model.status();
  // A model whose classifier says class 1 (pixel class 2) where the red channel is high.
  at::NoGradGuard no_grad;
  for (auto& p : (*model)->parameters()) p.zero_();
  auto params = (*model)->named_parameters();
  params["features.weight"][0][0][1][1] = 1.0;   // feature 0 = red
  params["classifier.weight"][2][0][0][0] = 10.0;  // pixel class 2 from feature 0
  params["classifier.bias"][0] = 1.0;              // background otherwise
  core::Batch batch;
  // An 8x6 original scaled by 2 to 16x12: a red 4x2 block at x 4..7, y 2..3 of the scaled image.
  batch.images = at::zeros({1, 3, 12, 16});
  batch.images[0][0].slice(0, 2, 4).slice(1, 4, 8).fill_(1.0);
  batch.image_sizes = at::tensor({12, 16}, at::kLong).view({1, 2});
  batch.samples.resize(1);
  batch.samples[0].original_width = 8;
  batch.samples[0].original_height = 6;
  batch.samples[0].scale_x = batch.samples[0].scale_y = 2.0;
  const std::vector<core::Sample> predictions = (*model)->Predict(batch);
  ASSERT_EQ(predictions.size(), 1u);
  ASSERT_EQ(predictions[0].objects.size(), 1u);
  const core::ObjectInstance& object = predictions[0].objects[0];
  EXPECT_EQ(object.label, 1);
  EXPECT_EQ(object.box, cv::Rect2f(2, 1, 2, 1));
  absl::StatusOr<cv::Mat> mask = core::DecodeRle(object.rle);
  ASSERT_TRUE(mask.ok()) << mask.status();
  EXPECT_EQ(mask->size(), cv::Size(8, 6));
  EXPECT_EQ(cv::countNonZero(*mask), 2);
  EXPECT_GT(object.score, 0.9f);
}

}  // namespace
}  // namespace vision::models::testing
