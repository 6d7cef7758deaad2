#include "data/synthetic/dataset_files.h"

#include <fstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace vision::data::synthetic {

namespace fs = std::filesystem;

absl::Status CreateDirectories(const fs::path& dir) {
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("cannot create '", dir.string(), "': ", error.message()));
  }
  return absl::OkStatus();
}

absl::Status PrepareEmptyDirectory(const fs::path& dir) {
  VISION_RETURN_IF_ERROR(CreateDirectories(dir));
  std::error_code error;
  if (!fs::is_empty(dir, error) || error) {
    return absl::FailedPreconditionError(absl::StrCat(
        "'", dir.string(),
        "' already holds files; write the synthetic dataset into a new or empty directory so "
        "that no image of an earlier run is mixed in"));
  }
  return absl::OkStatus();
}

absl::Status WriteWholeFile(const fs::path& path, const void* data, size_t size) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  file.close();
  if (!file) return absl::UnavailableError(absl::StrCat(path.string(), ": write failed"));
  return absl::OkStatus();
}

}  // namespace vision::data::synthetic
