// The one guard that turns LibTorch's exceptions into statuses at plugin and step boundaries.
#ifndef VISION_CORE_TORCH_GUARD_H_
#define VISION_CORE_TORCH_GUARD_H_

#include <exception>
#include <utility>

#include <c10/util/Exception.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace vision::core {

// Runs `f` (returning absl::Status or absl::StatusOr<T>); a c10::Error or other exception
// escaping it becomes an internal error naming `what`.
template <typename F>
auto GuardTorch(absl::string_view what, F&& f) -> decltype(f()) {
  try {
    return std::forward<F>(f)();
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat(what, ": LibTorch error: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  }
}

}  // namespace vision::core

#endif  // VISION_CORE_TORCH_GUARD_H_
