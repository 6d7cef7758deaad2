// Links every plugin of //tools:all_plugins, checks that each expected name is registered, and
// dry-runs every shipped .pbtxt (passed as arguments): loads it, then builds every component
// through the registries, with each dataset pointed at the test data in testdata/ for its type.
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/augmentation.h"
#include "core/backbone.h"
#include "core/comm_strategy.h"
#include "core/config/loader.h"
#include "core/dataset.h"
#include "core/evaluator.h"
#include "core/lr_schedule.h"
#include "core/model.h"
#include "core/optimizer.h"
#include "core/pipeline_builder.h"
#include "core/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vision::tools {
namespace {

using ::testing::HasSubstr;

std::vector<std::string>* config_paths = nullptr;

// The test data of each dataset type: options (text format) merged over a config's dataset
// options as --override merges them, field by field, so that a config's other options (its
// split) stay. A type may have several, tried in order until one builds: COCO's second has the
// real COCO's 80 categories, for configs written for COCO itself. Shipped configs of a new model
// need nothing here; a new dataset type needs an entry, and its testdata files in this test's
// `data`.
const std::map<std::string, std::vector<std::string>>& DatasetFixtures() {
  static const auto* fixtures = new std::map<std::string, std::vector<std::string>>{
      {"COCO",
       {R"pb([type.googleapis.com/vision.data.datasets.CocoOptions] {
               root: "testdata/coco"
               annotation_file: "annotations/instances_tiny.json"
               image_dir: "images"
             })pb",
        R"pb([type.googleapis.com/vision.data.datasets.CocoOptions] {
               root: "testdata/coco"
               annotation_file: "annotations/instances_tiny_coco80.json"
               image_dir: "images"
             })pb"}},
      {"Cityscapes", {R"pb([type.googleapis.com/vision.data.datasets.CityscapesOptions] {
                             root: "testdata/cityscapes"
                           })pb"}},
      {"ICDAR2015", {R"pb([type.googleapis.com/vision.data.datasets.ICDAR2015Options] {
                            root: "testdata/icdar2015"
                          })pb"}},
  };
  return *fixtures;
}

// The overrides that point `field` ("train_data") of a config whose dataset is `type` at the
// type's test data, one per fixture.
absl::StatusOr<std::vector<std::string>> FixtureOverrides(const std::string& field,
                                                          const std::string& type) {
  auto fixture = DatasetFixtures().find(type);
  if (fixture == DatasetFixtures().end()) {
    return absl::NotFoundError(absl::StrCat(
        "no test data for dataset type '", type, "' (", field,
        ".dataset.type): add an entry to DatasetFixtures() in tools/registration_test.cc and "
        "its testdata files to the test's data in tools/BUILD.bazel"));
  }
  std::vector<std::string> overrides;
  for (const std::string& options : fixture->second) {
    overrides.push_back(absl::StrCat(field, " { dataset { options { ", options, " } } }"));
  }
  return overrides;
}

// The config at `path` with its datasets pointed at their test data: one candidate per fixture
// (the same fixture index for train and eval data, or the type's only one).
absl::StatusOr<std::vector<core::TrainPipelineConfig>> LoadWithFixtures(const std::string& path) {
  VISION_ASSIGN_OR_RETURN(const core::TrainPipelineConfig config, core::LoadPipelineConfig(path));
  std::vector<std::vector<std::string>> per_role;
  const std::pair<const char*, const core::DataConfig*> roles[] = {
      {"train_data", &config.train_data()}, {"eval_data", &config.eval_data()}};
  size_t candidates = 1;
  for (const auto& [field, data] : roles) {
    if (!data->has_dataset()) continue;
    VISION_ASSIGN_OR_RETURN(std::vector<std::string> fixtures,
                            FixtureOverrides(field, data->dataset().type()));
    candidates = std::max(candidates, fixtures.size());
    per_role.push_back(std::move(fixtures));
  }
  std::vector<core::TrainPipelineConfig> configs;
  for (size_t i = 0; i < candidates; ++i) {
    std::vector<std::string> overrides;
    for (const std::vector<std::string>& fixtures : per_role) {
      overrides.push_back(fixtures[std::min(i, fixtures.size() - 1)]);
    }
    VISION_ASSIGN_OR_RETURN(core::TrainPipelineConfig candidate,
                            core::LoadPipelineConfig(path, overrides));
    configs.push_back(std::move(candidate));
  }
  return configs;
}

TEST(RegistrationTest, EveryPluginIsRegistered) {
  using ::testing::IsSupersetOf;
  EXPECT_THAT(core::ModelRegistry::Get().Names(), IsSupersetOf({"DBNet"}));
  EXPECT_THAT(core::BackboneRegistry::Get().Names(),
              IsSupersetOf({"ResNet18", "ResNet34", "ResNet50", "ResNet101"}));
  EXPECT_THAT(core::DatasetRegistry::Get().Names(),
              IsSupersetOf({"COCO", "Cityscapes", "ICDAR2015"}));
  EXPECT_THAT(core::AugmentationRegistry::Get().Names(),
              IsSupersetOf({"RandomScale", "RandomCrop", "RandomRotate", "HorizontalFlip",
                            "ColorJitter", "Resize", "PadToDivisor", "Normalize"}));
  EXPECT_THAT(core::OptimizerRegistry::Get().Names(), IsSupersetOf({"SGD", "Adam", "AdamW"}));
  EXPECT_THAT(core::LrScheduleRegistry::Get().Names(),
              IsSupersetOf({"Constant", "Poly", "Cosine", "MultiStep"}));
  EXPECT_THAT(core::CommStrategyRegistry::Get().Names(),
              IsSupersetOf({"allreduce", "bucketed", "fp16_compress", "bf16_compress"}));
  EXPECT_THAT(core::EvaluatorRegistry::Get().Names(),
              IsSupersetOf({"ICDAR2015Hmean", "SemanticSegmentation"}));
}

// Each entry of the table reads its test data, so that a config naming its type can dry-run.
TEST(RegistrationTest, EveryFixtureBuildsADatasetWithMetadata) {
  for (const auto& [type, fixtures] : DatasetFixtures()) {
    for (const std::string& options : fixtures) {
      SCOPED_TRACE(type);
      core::TrainPipelineConfig config;
      ASSERT_TRUE(core::MergeConfigText(absl::StrCat("train_data { dataset { type: \"", type,
                                                     "\" options { ", options, " } } }"),
                                        type, &config)
                      .ok());
      absl::StatusOr<std::unique_ptr<core::Dataset>> dataset =
          core::BuildDataset(config.train_data(), "train_data");
      ASSERT_TRUE(dataset.ok()) << dataset.status();
      EXPECT_GT((*dataset)->Size(), 0);
      EXPECT_TRUE((*dataset)->Metadata().has_value());
    }
  }
}

TEST(RegistrationTest, EveryShippedConfigDryRuns) {
  ASSERT_NE(config_paths, nullptr);
  ASSERT_FALSE(config_paths->empty()) << "no configs passed to the test";
  for (const std::string& path : *config_paths) {
    SCOPED_TRACE(path);
    absl::StatusOr<std::vector<core::TrainPipelineConfig>> candidates = LoadWithFixtures(path);
    ASSERT_TRUE(candidates.ok()) << candidates.status();
    // The first fixture the config builds with (its class count decides which).
    std::vector<std::string> errors;
    const core::TrainPipelineConfig* config = nullptr;
    for (const core::TrainPipelineConfig& candidate : *candidates) {
      absl::StatusOr<core::Pipeline> pipeline = core::BuildPipeline(candidate, 1);
      if (pipeline.ok()) {
        config = &candidate;
        break;
      }
      errors.push_back(pipeline.status().ToString());
    }
    ASSERT_NE(config, nullptr) << absl::StrJoin(errors, "\n");
    for (int world_size : {1, 2}) {
      absl::StatusOr<core::Pipeline> pipeline = core::BuildPipeline(*config, world_size);
      ASSERT_TRUE(pipeline.ok()) << pipeline.status();
      EXPECT_GT(pipeline->train_dataset->Size(), 0);
      // The dry run shows what the data is, as every shipped dataset states it.
      EXPECT_THAT(core::DescribePipeline(*config, *pipeline), HasSubstr("train data annotations: "));
    }
  }
}

}  // namespace
}  // namespace vision::tools

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  vision::tools::config_paths = new std::vector<std::string>(argv + 1, argv + argc);
  return RUN_ALL_TESTS();
}
