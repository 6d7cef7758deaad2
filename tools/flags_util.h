// Command-line helpers shared by the tools/ drivers.
#ifndef VISION_TOOLS_FLAGS_UTIL_H_
#define VISION_TOOLS_FLAGS_UTIL_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace vision::tools {

// Removes every `--override=TEXT` and `--override TEXT` from argv (abseil flags keep only the
// last occurrence of a flag, and override text may contain commas) and returns them in order.
// argc/argv are rewritten in place for absl::ParseCommandLine.
std::vector<std::string> ExtractRepeatedFlag(const std::string& name, int* argc, char** argv);

// Under `bazel run` a driver starts in its runfiles tree, while the relative paths a user gives
// (--config, and the data roots and output directories inside a config) mean the workspace they
// ran it from, which Bazel names in BUILD_WORKSPACE_DIRECTORY: changes into that directory when
// the variable is set. The one place that does it, for every driver and training target.
absl::Status EnterWorkspaceDirectory();

// The main() of every driver: sets the usage text, takes the repeatable --override flags out
// of argv, parses the abseil flags, enters the `bazel run` workspace (EnterWorkspaceDirectory),
// runs `run(overrides)`, and turns an error into "error: <message>" on stderr and exit code 1.
int RunDriver(int argc, char** argv, const char* usage,
              const std::function<absl::Status(const std::vector<std::string>& overrides)>& run);

}  // namespace vision::tools

#endif  // VISION_TOOLS_FLAGS_UTIL_H_
