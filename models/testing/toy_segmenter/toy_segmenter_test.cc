#include "models/testing/toy_segmenter/toy_segmenter.h"

#include <cmath>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "core/batch.h"
#include "gtest/gtest.h"
#include "models/testing/train_for_test.h"

namespace vision::models::testing {
namespace {

TEST(ToySegmenterTest, LossIgnoresTheIgnoreLabel) {
  ToySegmenterOptions options;
  options.set_num_classes(3);
  auto model = ToySegmenter::Create(options);
  ASSERT_TRUE(model.ok()) << model.status();
  core::Batch batch;
  batch.images = at::randn({1, 3, 4, 4});
  const at::Tensor logits = (*model)->Logits(batch.images).detach();
  // Only pixel (0, 0) carries a label: the loss is that pixel's cross-entropy.
  batch.targets["semantic"] = at::full({1, 4, 4}, core::kIgnoreLabel, at::kByte);
  batch.targets["semantic"][0][0][0] = 2;
  const double loss = (*model)->Losses(batch).at("ce").item<double>();
  const at::Tensor pixel = logits[0].select(1, 0).select(1, 0);
  EXPECT_NEAR(loss, -at::log_softmax(pixel, 0)[2].item<double>(), 1e-5);
}

// The label-map path of the core contract, end to end: the Cityscapes plugin's label maps are
// collated (padded with the ignore label) by the real loader and the model trains two steps
// through the real trainer; predictions come back as label maps at the original size.
TEST(ToySegmenterTest, TrainsTwoStepsThroughTheLoaderAndTrainer) {
  const std::vector<double> losses =
      TrainAndReadLoss("models/testing/toy_segmenter/configs/cityscapes_two_steps.pbtxt", 2, "ce");
  ASSERT_EQ(losses.size(), 2u);
  for (double value : losses) EXPECT_TRUE(std::isfinite(value) && value > 0.5 && value < 10) << value;
}

TEST(ToySegmenterTest, PredictsLabelMapsAtTheOriginalSize) {
  ToySegmenterOptions options;
  options.set_num_classes(5);
  auto model = ToySegmenter::Create(options);
  ASSERT_TRUE(model.ok()) << model.status();
  core::Batch batch;
  // Image 0 was 8x6 scaled by 2 (16x12), image 1 is 5x7 as it was; the batch pads to 16x12.
  batch.images = at::randn({2, 3, 12, 16});
  batch.image_sizes = at::tensor({12, 16, 7, 5}, at::kLong).view({2, 2});
  batch.samples.resize(2);
  batch.samples[0].original_width = 8;
  batch.samples[0].original_height = 6;
  batch.samples[0].scale_x = batch.samples[0].scale_y = 2.0;
  batch.samples[1].original_width = 5;
  batch.samples[1].original_height = 7;
  const std::vector<core::Sample> predictions = (*model)->Predict(batch);
  ASSERT_EQ(predictions.size(), 2u);
  EXPECT_EQ(predictions[0].semantic.size(), cv::Size(8, 6));
  EXPECT_EQ(predictions[1].semantic.size(), cv::Size(5, 7));
  double max_label = 0;
  cv::minMaxLoc(predictions[1].semantic, nullptr, &max_label);
  EXPECT_LT(max_label, 5);
}

}  // namespace
}  // namespace vision::models::testing
