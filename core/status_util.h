// The one way to add context to an error (with ASSIGN_OR_RETURN from status_macros.h, and
// GuardTorch from torch_guard.h for LibTorch's exceptions). Needs only abseil, so code that
// does not link LibTorch (the launcher, the config loader) uses it too.
#ifndef VISION_CORE_STATUS_UTIL_H_
#define VISION_CORE_STATUS_UTIL_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace vision::core {

// "<context>: <message>" with the status's code (a file, a config field, a sample) and its
// payloads (what a caller reads structurally, e.g. the plugin a registry missed); OK stays OK.
inline absl::Status WithContext(absl::string_view context, const absl::Status& status) {
  if (status.ok()) return status;
  absl::Status result(status.code(), absl::StrCat(context, ": ", status.message()));
  status.ForEachPayload([&result](absl::string_view type_url, const absl::Cord& payload) {
    result.SetPayload(type_url, payload);
  });
  return result;
}

template <typename T>
absl::StatusOr<T> WithContext(absl::string_view context, absl::StatusOr<T> result) {
  if (result.ok()) return result;
  return WithContext(context, result.status());
}

}  // namespace vision::core

#endif  // VISION_CORE_STATUS_UTIL_H_
