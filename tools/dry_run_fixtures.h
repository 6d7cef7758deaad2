// Dry runs of a pipeline config on the test data in testdata/: each dataset the config names is
// pointed at the fixture for its type, then every component is built through the registries.
// Shared by //tools:registration_test (every plugin linked) and the dry-run test of every
// training target (tools/training.bzl: only that target's plugins linked).
#ifndef VISION_TOOLS_DRY_RUN_FIXTURES_H_
#define VISION_TOOLS_DRY_RUN_FIXTURES_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/config/loader.h"

namespace vision::tools {

// The test data of each dataset type: options (text format) merged over a config's dataset
// options as --override merges them, field by field, so that a config's other options (its
// split) stay. A type may have several, tried in order until one builds: COCO's second has the
// real COCO's 80 categories, for configs written for COCO itself. Shipped configs of a new model
// need nothing here; a new dataset type needs an entry, and its testdata files in the `data` of
// //tools:dry_run_fixtures.
const std::map<std::string, std::vector<std::string>>& DatasetFixtures();

// The config at `path` with its datasets pointed at their test data: one candidate per fixture
// (the same fixture index for train and eval data, or the type's only one).
absl::StatusOr<std::vector<core::TrainPipelineConfig>> LoadWithFixtures(const std::string& path);

// The first candidate of LoadWithFixtures(path) whose pipeline builds for `world_size` (the
// dataset's class count decides which). When none builds: the first candidate's error (code
// and payloads, e.g. the plugin a registry missed) with every candidate's message.
absl::StatusOr<core::TrainPipelineConfig> FirstBuildingCandidate(const std::string& path,
                                                                 int world_size);

}  // namespace vision::tools

#endif  // VISION_TOOLS_DRY_RUN_FIXTURES_H_
