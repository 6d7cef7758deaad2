#include "models/testing/toy_segmenter/toy_segmenter.h"

#include <cmath>
#include <optional>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "core/batch.h"
#include "core/collectives.h"
#include "core/config/loader.h"
#include "core/pipeline_builder.h"
#include "engine/evaluation.h"
#include "gmock/gmock.h"
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
  const at::Tensor logits = (*model)->SegmentationLogits(batch.images).detach();
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

constexpr char kMultiScaleConfig[] =
    "models/testing/toy_segmenter/configs/cityscapes_multi_scale_eval.pbtxt";

// Every prediction of RunEvaluation over the config's eval data, with `inference` as
// EvaluationJob::segmentation_inference, fed by `augmentations` in batches of `batch_size`.
absl::StatusOr<std::vector<core::Sample>> Evaluate(
    core::Model* model, const core::Pipeline& pipeline,
    const std::vector<const core::Augmentation*>& augmentations, int batch_size,
    std::optional<core::SegmentationInferenceConfig> inference) {
  core::SingleProcess single;
  engine::EvaluationJob job;
  job.model = model;
  job.dataset = pipeline.eval_dataset.get();
  job.augmentations = augmentations;
  job.loader.batch_size = batch_size;
  job.loader.num_workers = 1;
  job.collectives = &single;
  job.segmentation_inference = std::move(inference);
  std::vector<core::Sample> predictions;
  job.on_prediction = [&](const core::Sample& prediction, const core::Sample& truth) {
    EXPECT_EQ(prediction.semantic.size(), cv::Size(truth.original_width, truth.original_height));
    double max_label = 0;
    cv::minMaxLoc(prediction.semantic, nullptr, &max_label);
    EXPECT_LT(max_label, 19);
    predictions.push_back(prediction);
    return absl::OkStatus();
  };
  absl::StatusOr<std::map<std::string, double>> metrics = engine::RunEvaluation(job);
  if (!metrics.ok()) return metrics.status();
  return predictions;
}

int DifferentPixels(const std::vector<core::Sample>& a, const std::vector<core::Sample>& b) {
  EXPECT_EQ(a.size(), b.size());
  int different = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    EXPECT_EQ(a[i].id, b[i].id);
    different += cv::countNonZero(a[i].semantic != b[i].semantic);
  }
  return different;
}

// The shipped config's evaluation.segmentation_inference (scales 0.5, 1, 1.5, flip, 16x32
// windows over images fed at 24x48 and padded to 32x64) through the real loader and
// RunEvaluation: label maps at the original 8x16 size, not those of single-scale inference.
TEST(ToySegmenterTest, MultiScaleFlipSlidingWindowEvaluationOnCityscapes) {
  absl::StatusOr<core::TrainPipelineConfig> config = core::LoadPipelineConfig(kMultiScaleConfig);
  ASSERT_TRUE(config.ok()) << config.status();
  at::manual_seed(1);
  absl::StatusOr<core::Pipeline> pipeline = core::BuildPipeline(*config, 1);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  std::vector<const core::Augmentation*> augmentations;
  for (const auto& a : pipeline->eval_augmentations) augmentations.push_back(a.get());
  absl::StatusOr<std::vector<core::Sample>> multi_scale =
      Evaluate(pipeline->model.get(), *pipeline, augmentations, 2,
               config->evaluation().segmentation_inference());
  ASSERT_TRUE(multi_scale.ok()) << multi_scale.status();
  ASSERT_EQ(multi_scale->size(), 3u);
  absl::StatusOr<std::vector<core::Sample>> single_scale =
      Evaluate(pipeline->model.get(), *pipeline, augmentations, 2, core::SegmentationInferenceConfig());
  ASSERT_TRUE(single_scale.ok()) << single_scale.status();
  EXPECT_GT(DifferentPixels(*multi_scale, *single_scale), 0);
}

// The option with its defaults (scale 1, no flip, whole images) changes nothing: through the
// loader (one image per batch, so nothing is padded) the label maps are the model's Predict.
TEST(ToySegmenterTest, DefaultSegmentationInferenceEqualsPredict) {
  absl::StatusOr<core::TrainPipelineConfig> config = core::LoadPipelineConfig(kMultiScaleConfig);
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<core::Pipeline> pipeline = core::BuildPipeline(*config, 1);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  // Resize and Normalize, without PadToDivisor.
  const std::vector<const core::Augmentation*> augmentations = {
      pipeline->eval_augmentations[0].get(), pipeline->eval_augmentations[2].get()};
  absl::StatusOr<std::vector<core::Sample>> predicted =
      Evaluate(pipeline->model.get(), *pipeline, augmentations, 1, std::nullopt);
  ASSERT_TRUE(predicted.ok()) << predicted.status();
  absl::StatusOr<std::vector<core::Sample>> ours =
      Evaluate(pipeline->model.get(), *pipeline, augmentations, 1, core::SegmentationInferenceConfig());
  ASSERT_TRUE(ours.ok()) << ours.status();
  ASSERT_EQ(ours->size(), 3u);
  EXPECT_EQ(DifferentPixels(*ours, *predicted), 0);
}

// A model that predicts something other than label maps.
class NotASegmenter : public core::Model {
 public:
  std::map<std::string, at::Tensor> Losses(const core::Batch&) override {
    TORCH_CHECK(false, "not trained here");
  }
  std::vector<core::Sample> Predict(const core::Batch& batch) override {
    return std::vector<core::Sample>(batch.samples.size());
  }
};

TEST(ToySegmenterTest, SegmentationInferenceRefusesOtherModelsByName) {
  absl::StatusOr<core::TrainPipelineConfig> config = core::LoadPipelineConfig(kMultiScaleConfig);
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<core::Pipeline> pipeline = core::BuildPipeline(*config, 1);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  NotASegmenter model;
  absl::StatusOr<std::vector<core::Sample>> result =
      Evaluate(&model, *pipeline, {}, 1, config->evaluation().segmentation_inference());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(),
              ::testing::HasSubstr("evaluation.segmentation_inference is set, but the model "
                                   "(vision::models::testing::(anonymous namespace)::NotASegmenter) "
                                   "is not a semantic segmentation model"));
  EXPECT_THAT(result.status().message(),
              ::testing::HasSubstr("Remove evaluation.segmentation_inference from the config"));
}

}  // namespace
}  // namespace vision::models::testing
