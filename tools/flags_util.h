// Command-line helpers shared by the tools/ drivers.
#ifndef VISION_TOOLS_FLAGS_UTIL_H_
#define VISION_TOOLS_FLAGS_UTIL_H_

#include <string>
#include <vector>

namespace vision::tools {

// Removes every `--override=TEXT` and `--override TEXT` from argv (abseil flags keep only the
// last occurrence of a flag, and override text may contain commas) and returns them in order.
// argc/argv are rewritten in place for absl::ParseCommandLine.
std::vector<std::string> ExtractRepeatedFlag(const std::string& name, int* argc, char** argv);

}  // namespace vision::tools

#endif  // VISION_TOOLS_FLAGS_UTIL_H_
