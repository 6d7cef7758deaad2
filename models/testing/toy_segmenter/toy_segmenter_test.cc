#include "models/testing/toy_segmenter/toy_segmenter.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "core/batch.h"
#include "core/collectives.h"
#include "core/config/loader.h"
#include "engine/trainer.h"
#include "gtest/gtest.h"

namespace vision::models::testing {
namespace {

namespace fs = std::filesystem;

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
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/run");
  absl::StatusOr<core::TrainPipelineConfig> config = core::LoadPipelineConfig(
      "models/testing/toy_segmenter/configs/cityscapes_two_steps.pbtxt",
      {absl::StrCat("checkpoint { output_dir: \"", dir, "\" }")});
  ASSERT_TRUE(config.ok()) << config.status();
  core::SingleProcess single;
  engine::TrainerOptions options;
  options.verbose = false;
  auto trainer = engine::Trainer::Create(*config, &single, options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  auto result = (*trainer)->Run();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->steps, 2);
  EXPECT_TRUE(fs::exists(dir + "/checkpoint_2.pt"));
  // Both steps logged a finite cross-entropy near ln(19) (an untrained 19-way classifier).
  std::ifstream log(dir + "/metrics.jsonl");
  std::string line;
  int logged = 0;
  while (std::getline(log, line)) {
    const size_t at = line.find("\"ce\":");
    if (at == std::string::npos) continue;
    const double ce = std::stod(line.substr(at + 5));
    EXPECT_TRUE(std::isfinite(ce) && ce > 0.5 && ce < 10) << line;
    ++logged;
  }
  EXPECT_EQ(logged, 2);
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
