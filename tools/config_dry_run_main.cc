// The dry-run test of a training target (tools/training.bzl): linked with exactly the target's
// plugins, it builds every component of the target's config, with the datasets on the test data
// in testdata/, for one process and for the target's nproc_per_node. A config that names a
// plugin the target does not link fails, naming the plugin and the Bazel target to add to deps.
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/config/loader.h"
#include "core/pipeline_builder.h"
#include "core/status_macros.h"
#include "tools/dry_run_fixtures.h"
#include "tools/flags_util.h"
#include "tools/plugin_targets.h"

ABSL_FLAG(std::string, config, "", "The training target's config (a runfiles path).");
ABSL_FLAG(std::string, target, "", "The training target's label, named in messages.");
ABSL_FLAG(int, nproc_per_node, 1, "The target's processes per node: also dry-run that many.");

namespace vision::tools {
namespace {

absl::Status MissingPlugins(const std::string& path, const std::string& target,
                            const std::vector<std::string>& hints, const absl::Status& cause) {
  std::string message = absl::StrCat(path, " needs plugins that ", target, " does not link:\n  ",
                                     absl::StrJoin(hints, "\n  "));
  if (!cause.ok()) absl::StrAppend(&message, "\n(the dry run stopped at: ", cause.message(), ")");
  return absl::FailedPreconditionError(message);
}

absl::Status Run(const std::vector<std::string>& overrides) {
  const std::string path = absl::GetFlag(FLAGS_config);
  const std::string target = absl::GetFlag(FLAGS_target);
  if (path.empty() || target.empty() || !overrides.empty()) {
    return absl::InvalidArgumentError(
        "usage: --config=PATH --target=LABEL [--nproc_per_node=N] (made by "
        "vision_training_target in tools/training.bzl)");
  }
  std::ifstream file(path);
  if (!file) {
    return absl::NotFoundError(absl::StrCat("cannot read the config ", path,
                                            ": is it in the training target's runfiles?"));
  }
  std::stringstream text;
  text << file.rdbuf();
  // Options types first: without them the config does not parse, and the loader's error would
  // not say which target provides them.
  const std::vector<std::string> unparsable =
      MissingPluginHints(text.str(), absl::OkStatus(), target);
  if (!unparsable.empty()) return MissingPlugins(path, target, unparsable, absl::OkStatus());

  std::set<int> world_sizes = {1, absl::GetFlag(FLAGS_nproc_per_node)};
  for (const int world_size : world_sizes) {
    const absl::StatusOr<core::TrainPipelineConfig> config =
        FirstBuildingCandidate(path, world_size);
    if (!config.ok()) {
      const std::vector<std::string> hints =
          MissingPluginHints(text.str(), config.status(), target);
      if (!hints.empty()) return MissingPlugins(path, target, hints, config.status());
      return config.status();
    }
    VISION_ASSIGN_OR_RETURN(const core::Pipeline pipeline,
                            core::BuildPipeline(*config, world_size));
    if (pipeline.train_dataset->Size() == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, ": the training data on the test fixtures is empty"));
    }
    std::printf("# %s, world size %d, datasets on testdata/\n%s\n", path.c_str(), world_size,
                core::DescribePipeline(*config, pipeline).c_str());
  }
  std::printf("OK: %s builds with the plugins %s links\n", path.c_str(), target.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace vision::tools

int main(int argc, char** argv) {
  return vision::tools::RunDriver(argc, argv,
                                  "Dry-runs a training target's config with its linked plugins.",
                                  vision::tools::Run);
}
