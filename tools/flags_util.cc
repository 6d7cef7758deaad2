#include "tools/flags_util.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"

namespace vision::tools {

std::vector<std::string> ExtractRepeatedFlag(const std::string& name, int* argc, char** argv) {
  const std::string with_equals = "--" + name + "=";
  const std::string bare = "--" + name;
  std::vector<std::string> values;
  int out = 0;
  for (int i = 0; i < *argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {  // everything after "--" belongs to someone else
      for (; i < *argc; ++i) argv[out++] = argv[i];
      break;
    }
    if (arg.rfind(with_equals, 0) == 0) {
      values.push_back(arg.substr(with_equals.size()));
    } else if (arg == bare && i + 1 < *argc) {
      values.push_back(argv[++i]);
    } else {
      argv[out++] = argv[i];
    }
  }
  *argc = out;
  return values;
}

absl::Status EnterWorkspaceDirectory() {
  const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  if (workspace == nullptr || *workspace == '\0') return absl::OkStatus();
  if (::chdir(workspace) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot enter the workspace directory BUILD_WORKSPACE_DIRECTORY=", workspace, ": ",
        std::strerror(errno), " (unset the variable to resolve paths against the current "
        "directory)"));
  }
  return absl::OkStatus();
}

int RunDriver(int argc, char** argv, const char* usage,
              const std::function<absl::Status(const std::vector<std::string>&)>& run) {
  absl::SetProgramUsageMessage(usage);
  const std::vector<std::string> overrides = ExtractRepeatedFlag("override", &argc, argv);
  absl::ParseCommandLine(argc, argv);
  absl::Status status = EnterWorkspaceDirectory();
  if (status.ok()) status = run(overrides);
  if (!status.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace vision::tools
