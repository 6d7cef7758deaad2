// The evaluator in a pipeline built from a config: the real Cityscapes plugin's metadata through
// the pipeline builder's data-agreement check and PrepareEvaluator, and an evaluation of
// ToySegmenter through the engine's RunEvaluation with result files.
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "absl/status/statusor.h"
#include "core/collectives.h"
#include "core/config/loader.h"
#include "core/pipeline_builder.h"
#include "engine/evaluation.h"
#include "evaluation/semantic_segmentation/semantic_segmentation_evaluator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::evaluation::semantic_segmentation {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kConfig[] =
    "evaluation/semantic_segmentation/testdata/toy_segmenter_cityscapes.pbtxt";

TEST(SemanticSegmentationPipelineTest, DataAgreementChecksTheEvaluatorsClassCount) {
  absl::StatusOr<core::TrainPipelineConfig> config = core::LoadPipelineConfig(kConfig);
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<core::Pipeline> pipeline = core::BuildPipeline(*config, 1);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  EXPECT_EQ(pipeline->evaluator->MainMetric(), "mIoU");
  // PrepareEvaluator gave it Cityscapes' categories: an empty evaluation already scores them.
  EXPECT_EQ(pipeline->evaluator->Compute().count("category_mIoU"), 1u);

  absl::StatusOr<core::TrainPipelineConfig> eighteen = core::LoadPipelineConfig(
      kConfig, {"evaluation { evaluator { options { "
                "[type.googleapis.com/vision.evaluation.SemanticSegmentationOptions] { "
                "num_classes: 18 } } } }"});
  ASSERT_TRUE(eighteen.ok()) << eighteen.status();
  const absl::Status refused = core::BuildPipeline(*eighteen, 1).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(),
              AllOf(HasSubstr("evaluation.evaluator.options.num_classes is 18"),
                    HasSubstr("set evaluation.evaluator.options.num_classes: 19")));
}

// RunEvaluation's metrics are the evaluator's over the predictions it made, and each image's
// prediction is written as Cityscapes label ids under labelIds/<city>/.
TEST(SemanticSegmentationPipelineTest, EvaluatesToySegmenterThroughTheEngine) {
  absl::StatusOr<core::TrainPipelineConfig> config = core::LoadPipelineConfig(kConfig);
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<core::Pipeline> pipeline = core::BuildPipeline(*config, 1);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();

  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "miou_pipeline_results";
  std::filesystem::remove_all(dir);
  core::SingleProcess single;
  engine::EvaluationJob job;
  job.model = pipeline->model.get();
  job.dataset = pipeline->eval_dataset.get();
  for (const auto& a : pipeline->eval_augmentations) job.augmentations.push_back(a.get());
  job.evaluator = pipeline->evaluator.get();
  job.loader.batch_size = 2;
  job.loader.num_workers = 1;
  job.collectives = &single;
  job.results_dir = dir.string();
  std::vector<std::pair<core::Sample, core::Sample>> scored;
  job.on_prediction = [&](const core::Sample& prediction, const core::Sample& truth) {
    scored.emplace_back(prediction, truth);
    return absl::OkStatus();
  };
  absl::StatusOr<std::map<std::string, double>> metrics = engine::RunEvaluation(job);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  ASSERT_EQ(scored.size(), 3u);

  absl::StatusOr<std::unique_ptr<SemanticSegmentationEvaluator>> direct =
      SemanticSegmentationEvaluator::Create(SemanticSegmentationOptions());
  ASSERT_TRUE(direct.ok());
  ASSERT_TRUE((*direct)->SetDatasetMetadata(*pipeline->eval_dataset->Metadata()).ok());
  for (const auto& [prediction, truth] : scored) {
    ASSERT_TRUE((*direct)->Add(prediction, truth).ok());
  }
  EXPECT_EQ(*metrics, (*direct)->Compute());
  EXPECT_EQ(metrics->count("mIoU"), 1u);
  EXPECT_EQ(metrics->count("category_mIoU"), 1u);

  // Train id t is written as Cityscapes label id source_ids[t].
  const std::vector<int64_t> source_ids = pipeline->eval_dataset->Metadata()->source_ids;
  for (const auto& [prediction, truth] : scored) {
    const std::filesystem::path image(truth.image_path);
    const std::filesystem::path written = dir / "labelIds" / image.parent_path().filename() /
                                          image.filename().replace_extension(".png");
    const cv::Mat ids = cv::imread(written.string(), cv::IMREAD_UNCHANGED);
    ASSERT_EQ(ids.size(), prediction.semantic.size()) << written;
    for (int y = 0; y < ids.rows; ++y) {
      for (int x = 0; x < ids.cols; ++x) {
        ASSERT_EQ(ids.at<uint8_t>(y, x), source_ids.at(prediction.semantic.at<uint8_t>(y, x)))
            << written << " at " << x << "," << y;
      }
    }
    EXPECT_TRUE(std::filesystem::exists(dir / "color" / image.parent_path().filename() /
                                        image.filename().replace_extension(".png")));
  }
}

}  // namespace
}  // namespace vision::evaluation::semantic_segmentation
