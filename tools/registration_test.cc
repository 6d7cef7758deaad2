// Links every plugin of //tools:all_plugins, checks that each plugin library in it registers
// (against the manifest the build derives from all_plugins, passed as the first argument) and
// that the generated hint table matches, and dry-runs every shipped .pbtxt (the other
// arguments): loads it, then builds every component through the registries, with each dataset
// pointed at the test data in testdata/ for its type (tools/dry_run_fixtures.h).
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/config/loader.h"
#include "core/dataset.h"
#include "core/pipeline_builder.h"
#include "core/plugin_catalog.h"
#include "core/status_macros.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"
#include "tools/dry_run_fixtures.h"
#include "tools/plugin_targets.h"

namespace vision::tools {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

std::string* manifest_path = nullptr;
std::vector<std::string>* config_paths = nullptr;

std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.is_open()) << "cannot read " << path;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

// Every library below //tools:all_plugins (the manifest the build derives from it) registers at
// least one plugin, and every registration names the library it came from: a plugin library
// that lost its registration (a missing VISION_REGISTER_PLUGIN, a cc_library without
// alwayslink) fails here by name, with no hand-kept list of plugin names to update.
TEST(RegistrationTest, EveryPluginLibraryRegisters) {
  ASSERT_NE(manifest_path, nullptr);
  const std::vector<std::string> libraries = ReadLines(*manifest_path);
  ASSERT_FALSE(libraries.empty()) << "no plugin library in " << *manifest_path;
  std::map<std::string, std::vector<std::string>> registered_by;  // label -> "family name"
  for (const core::FamilyRegistrations& family : core::RegisteredPlugins()) {
    for (const core::Registration& plugin : family.plugins) {
      SCOPED_TRACE(absl::StrCat(family.family, " '", plugin.name, "' at ", plugin.site));
      EXPECT_THAT(libraries, Contains(plugin.label))
          << "registered by a library outside //tools:all_plugins or not built with vision_plugin";
      registered_by[plugin.label].push_back(absl::StrCat(family.family, " ", plugin.name));
    }
  }
  for (const std::string& library : libraries) {
    EXPECT_TRUE(registered_by.count(library) > 0)
        << library << " is in //tools:all_plugins but registers no plugin in this binary";
  }
}

// The hint table was written at build time by another binary linking the same plugins
// (//tools:plugin_table_main): it holds exactly what this binary registers, with each options
// type linked, so a training target's dry-run test names real plugins and targets.
TEST(RegistrationTest, PluginTargetsIsWhatAllPluginsRegisters) {
  std::vector<std::string> registered;
  for (const core::FamilyRegistrations& family : core::RegisteredPlugins()) {
    for (const core::Registration& plugin : family.plugins) {
      registered.push_back(absl::StrCat(family.family, " ", plugin.name, " ", plugin.options_type,
                                        " ", plugin.label));
    }
  }
  std::vector<std::string> in_table;
  for (const PluginTarget& plugin : PluginTargets()) {
    in_table.push_back(
        absl::StrCat(plugin.family, " ", plugin.name, " ", plugin.options_type, " ", plugin.label));
    EXPECT_NE(google::protobuf::DescriptorPool::generated_pool()->FindMessageTypeByName(
                  plugin.options_type),
              nullptr)
        << "options type " << plugin.options_type << " is not linked";
  }
  EXPECT_EQ(in_table, registered);
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
      EXPECT_THAT(core::DescribePipeline(*config, *pipeline),
                  HasSubstr("train data annotations: "));
    }
  }
}

}  // namespace
}  // namespace vision::tools

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PLUGIN_MANIFEST [CONFIG.pbtxt...]\n", argv[0]);
    return 2;
  }
  vision::tools::manifest_path = new std::string(argv[1]);
  vision::tools::config_paths = new std::vector<std::string>(argv + 2, argv + argc);
  return RUN_ALL_TESTS();
}
