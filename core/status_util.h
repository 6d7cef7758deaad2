// The one way to add context to an error, and the one guard that turns LibTorch's exceptions
// into statuses at plugin and step boundaries (with ASSIGN_OR_RETURN from status_macros.h).
#ifndef VISION_CORE_STATUS_UTIL_H_
#define VISION_CORE_STATUS_UTIL_H_

#include <exception>
#include <utility>

#include <c10/util/Exception.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace vision::core {

// "<context>: <message>" with the status's code (a file, a config field, a sample); OK stays OK.
inline absl::Status WithContext(absl::string_view context, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

template <typename T>
absl::StatusOr<T> WithContext(absl::string_view context, absl::StatusOr<T> result) {
  if (result.ok()) return result;
  return WithContext(context, result.status());
}

// Runs `f` (returning absl::Status or absl::StatusOr<T>); a c10::Error or other exception
// escaping it becomes an internal error naming `what`.
template <typename F>
auto GuardTorch(absl::string_view what, F&& f) -> decltype(f()) {
  try {
    return std::forward<F>(f)();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(what, ": LibTorch error: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  }
}

}  // namespace vision::core

#endif  // VISION_CORE_STATUS_UTIL_H_
