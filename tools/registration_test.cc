// Links every plugin of //tools:all_plugins, checks that each expected name is registered and
// that tools/plugin_targets.cc knows the target of each, and dry-runs every shipped .pbtxt
// (passed as arguments): loads it, then builds every component through the registries, with
// each dataset pointed at the test data in testdata/ for its type (tools/dry_run_fixtures.h).
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/augmentation.h"
#include "core/backbone.h"
#include "core/comm_strategy.h"
#include "core/config/loader.h"
#include "core/dataset.h"
#include "core/evaluator.h"
#include "core/hook.h"
#include "core/lr_schedule.h"
#include "core/model.h"
#include "core/optimizer.h"
#include "core/pipeline_builder.h"
#include "core/status_macros.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"
#include "tools/dry_run_fixtures.h"
#include "tools/plugin_targets.h"

namespace vision::tools {
namespace {

using ::testing::HasSubstr;

std::vector<std::string>* config_paths = nullptr;

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
  EXPECT_THAT(core::HookRegistry::Get().Names(), IsSupersetOf({"EarlyStopping"}));
}

// The one table of plugin targets matches what all_plugins registers, both ways, so the hint of
// a training target's dry-run test names a real plugin and a target that provides its options.
TEST(RegistrationTest, EveryPluginHasItsTargetInPluginTargets) {
  std::map<std::string, std::vector<std::string>> registered = {
      {core::ModelRegistry::Get().family(), core::ModelRegistry::Get().Names()},
      {core::BackboneRegistry::Get().family(), core::BackboneRegistry::Get().Names()},
      {core::DatasetRegistry::Get().family(), core::DatasetRegistry::Get().Names()},
      {core::AugmentationRegistry::Get().family(), core::AugmentationRegistry::Get().Names()},
      {core::OptimizerRegistry::Get().family(), core::OptimizerRegistry::Get().Names()},
      {core::LrScheduleRegistry::Get().family(), core::LrScheduleRegistry::Get().Names()},
      {core::CommStrategyRegistry::Get().family(), core::CommStrategyRegistry::Get().Names()},
      {core::EvaluatorRegistry::Get().family(), core::EvaluatorRegistry::Get().Names()},
      {core::HookRegistry::Get().family(), core::HookRegistry::Get().Names()},
  };
  std::map<std::string, std::vector<std::string>> in_table;
  for (const PluginTarget& plugin : PluginTargets()) {
    SCOPED_TRACE(absl::StrCat(plugin.family, " ", plugin.name));
    in_table[plugin.family].push_back(plugin.name);
    EXPECT_NE(google::protobuf::DescriptorPool::generated_pool()->FindMessageTypeByName(
                  plugin.options_type),
              nullptr)
        << "options type " << plugin.options_type << " is not linked";
    EXPECT_THAT(std::string(plugin.label), ::testing::StartsWith("//"));
  }
  for (auto& [family, names] : in_table) std::sort(names.begin(), names.end());
  for (const auto& [family, names] : registered) {
    EXPECT_EQ(in_table[family], names)
        << "the " << family << " plugins of //tools:all_plugins and tools/plugin_targets.cc differ";
  }
  EXPECT_EQ(in_table.size(), registered.size()) << "a family in the table that is not registered";
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
    // The first fixture the config builds with (its class count decides which).
    const absl::StatusOr<core::TrainPipelineConfig> config = FirstBuildingCandidate(path, 1);
    ASSERT_TRUE(config.ok()) << config.status();
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
