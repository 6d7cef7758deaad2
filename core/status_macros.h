// Status propagation macros (Debian's abseil 20220623 ships none).
#ifndef VISION_CORE_STATUS_MACROS_H_
#define VISION_CORE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define VISION_STATUS_CONCAT_INNER_(a, b) a##b
#define VISION_STATUS_CONCAT_(a, b) VISION_STATUS_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function if `expr` is not OK.
#define VISION_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    const ::absl::Status vision_status_ = (expr);    \
    if (!vision_status_.ok()) return vision_status_; \
  } while (0)

// `lhs = value of expr` or return its status. `lhs` may declare a variable: `auto x`.
#define VISION_ASSIGN_OR_RETURN(lhs, expr) \
  VISION_ASSIGN_OR_RETURN_IMPL_(VISION_STATUS_CONCAT_(vision_statusor_, __LINE__), lhs, expr)
#define VISION_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return statusor.status();            \
  lhs = std::move(statusor).value()

#endif  // VISION_CORE_STATUS_MACROS_H_
