#include "tools/flags_util.h"

#include <cstdio>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"

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

int RunDriver(int argc, char** argv, const char* usage,
              const std::function<absl::Status(const std::vector<std::string>&)>& run) {
  absl::SetProgramUsageMessage(usage);
  const std::vector<std::string> overrides = ExtractRepeatedFlag("override", &argc, argv);
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = run(overrides);
  if (!status.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace vision::tools
