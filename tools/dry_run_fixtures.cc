#include "tools/dry_run_fixtures.h"

#include <algorithm>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/pipeline_builder.h"
#include "core/status_macros.h"

namespace vision::tools {
namespace {

// The overrides that point `field` ("train_data") of a config whose dataset is `type` at the
// type's test data, one per fixture.
absl::StatusOr<std::vector<std::string>> FixtureOverrides(const std::string& field,
                                                          const std::string& type) {
  auto fixture = DatasetFixtures().find(type);
  if (fixture == DatasetFixtures().end()) {
    return absl::NotFoundError(absl::StrCat(
        "no test data for dataset type '", type, "' (", field,
        ".dataset.type): add an entry to DatasetFixtures() in tools/dry_run_fixtures.cc and "
        "its testdata files to the data of //tools:dry_run_fixtures"));
  }
  std::vector<std::string> overrides;
  for (const std::string& options : fixture->second) {
    overrides.push_back(absl::StrCat(field, " { dataset { options { ", options, " } } }"));
  }
  return overrides;
}

}  // namespace

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

absl::StatusOr<core::TrainPipelineConfig> FirstBuildingCandidate(const std::string& path,
                                                                 int world_size) {
  VISION_ASSIGN_OR_RETURN(std::vector<core::TrainPipelineConfig> candidates,
                          LoadWithFixtures(path));
  std::vector<absl::Status> errors;
  for (core::TrainPipelineConfig& candidate : candidates) {
    const absl::StatusOr<core::Pipeline> pipeline = core::BuildPipeline(candidate, world_size);
    if (pipeline.ok()) return std::move(candidate);
    errors.push_back(pipeline.status());
  }
  std::vector<std::string> messages;
  for (const absl::Status& error : errors) messages.emplace_back(error.message());
  absl::Status status(errors.front().code(), absl::StrJoin(messages, "\n"));
  errors.front().ForEachPayload([&status](absl::string_view type_url, const absl::Cord& payload) {
    status.SetPayload(type_url, payload);
  });
  return status;
}

}  // namespace vision::tools
