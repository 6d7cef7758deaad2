// Loads the pipeline config: a .pbtxt file, then command-line overrides in text format,
// merged in order (protobuf merge semantics: singular fields replace, repeated fields append),
// then validation of every core field. Plugin options are validated by the plugins when built.
#ifndef VISION_CORE_CONFIG_LOADER_H_
#define VISION_CORE_CONFIG_LOADER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/config/pipeline.pb.h"

namespace vision::core {

// What a config is loaded for. Training needs every section. Looking at data (inspect_data)
// needs only the data sections, and the model if one is given (for its training targets), so
// a config of just a dataset and its augmentations is enough there.
enum class ConfigUse { kTraining, kDataOnly };

// Reads `path`, merges `overrides` and validates. Errors name the file (or override), line
// and column for syntax errors, and the field path for invalid values.
absl::StatusOr<TrainPipelineConfig> LoadPipelineConfig(
    const std::string& path, const std::vector<std::string>& overrides = {},
    ConfigUse use = ConfigUse::kTraining);

// Parses text-format `text` (named `source` in errors) into `config`, merging.
absl::Status MergeConfigText(const std::string& text, const std::string& source,
                             TrainPipelineConfig* config);

// Checks required fields and ranges; the error lists every problem with its field path.
absl::Status ValidatePipelineConfig(const TrainPipelineConfig& config,
                                    ConfigUse use = ConfigUse::kTraining);

// Checks segmentation inference options (evaluation.segmentation_inference, also part of
// ValidatePipelineConfig); every problem is named as `field`.<option>.
absl::Status ValidateSegmentationInferenceConfig(
    const SegmentationInferenceConfig& config,
    const std::string& field = "evaluation.segmentation_inference");

// The config in canonical text format (Any payloads expanded, map keys sorted).
std::string ConfigToText(const TrainPipelineConfig& config);

// The fields in which `a` and `b` differ, one per line ("modified: optimizer.lr: 0.1 -> 0.2").
std::string ConfigDifferences(const TrainPipelineConfig& a, const TrainPipelineConfig& b);

// A stable 16-hex-digit fingerprint of the canonical text, equal on every rank that loaded
// the same config with the same overrides.
std::string ConfigFingerprint(const TrainPipelineConfig& config);

}  // namespace vision::core

#endif  // VISION_CORE_CONFIG_LOADER_H_
