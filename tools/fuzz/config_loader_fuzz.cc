// Fuzzes the pipeline config loader (core/config/loader.h) through LoadPipelineConfig: the
// input up to the first NUL byte is the .pbtxt file, each further NUL-separated part one
// --override. Every plugin options message is linked, so Any payloads are expanded and merged
// as in tools/train. A config that loads must print, fingerprint and re-load to the same config.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "core/config/loader.h"
#include "tools/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vision;
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts = absl::StrSplit(input, '\0');
  const std::string& path = fuzz::ScratchPath(".pbtxt");
  fuzz::WriteScratch(path, reinterpret_cast<const uint8_t*>(parts[0].data()), parts[0].size());
  const std::vector<std::string> overrides(parts.begin() + 1, parts.end());
  for (core::ConfigUse use : {core::ConfigUse::kTraining, core::ConfigUse::kDataOnly}) {
    absl::StatusOr<core::TrainPipelineConfig> config =
        core::LoadPipelineConfig(path, overrides, use);
    if (!config.ok()) {
      VISION_FUZZ_CHECK(!config.status().message().empty());
      continue;
    }
    const std::string text = core::ConfigToText(*config);
    core::TrainPipelineConfig reparsed;
    VISION_FUZZ_CHECK(core::MergeConfigText(text, "canonical text", &reparsed).ok());
    VISION_FUZZ_CHECK(core::ConfigFingerprint(reparsed) == core::ConfigFingerprint(*config));
    VISION_FUZZ_CHECK(core::ConfigDifferences(reparsed, *config).empty());
  }
  return 0;
}
