// File-system steps every synthetic dataset generator shares: directories that must start
// empty (so no file of an earlier run is mixed into a new dataset) and whole-file writes that
// report failures with the path.
#ifndef VISION_DATA_SYNTHETIC_DATASET_FILES_H_
#define VISION_DATA_SYNTHETIC_DATASET_FILES_H_

#include <cstddef>
#include <filesystem>

#include "absl/status/status.h"

namespace vision::data::synthetic {

// Creates `dir` and its parents if missing.
absl::Status CreateDirectories(const std::filesystem::path& dir);

// Creates `dir` if missing and fails if it holds anything: a generator writes each split into
// a new or empty directory.
absl::Status PrepareEmptyDirectory(const std::filesystem::path& dir);

// Writes `size` bytes to `path`, replacing it.
absl::Status WriteWholeFile(const std::filesystem::path& path, const void* data, size_t size);

}  // namespace vision::data::synthetic

#endif  // VISION_DATA_SYNTHETIC_DATASET_FILES_H_
