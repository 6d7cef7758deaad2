// The status for a failed file operation: the caller's description plus the errno text, with
// the code errno implies (NotFound, PermissionDenied, ...).
#ifndef VISION_ENGINE_LOGGING_FILE_ERROR_H_
#define VISION_ENGINE_LOGGING_FILE_ERROR_H_

#include <cerrno>
#include <string>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace vision::engine::logging {

inline absl::Status FileError(int error, const std::string& what) {
  // Short stdio writes do not always set errno, and errno 0 would map to an OK status.
  if (error == 0) error = EIO;
  return absl::Status(
      absl::ErrnoToStatusCode(error),
      absl::StrCat(what, ": ", std::error_code(error, std::generic_category()).message()));
}

}  // namespace vision::engine::logging

#endif  // VISION_ENGINE_LOGGING_FILE_ERROR_H_
