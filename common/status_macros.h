// Status propagation helpers used across pstrain.
#ifndef PST_COMMON_STATUS_MACROS_H_
#define PST_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PST_CONCAT_INNER_(a, b) a##b
#define PST_CONCAT_(a, b) PST_CONCAT_INNER_(a, b)

// Returns from the current function if `expr` is not OK.
#define PST_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::absl::Status pst_status_ = (expr);       \
    if (!pst_status_.ok()) return pst_status_; \
  } while (0)

// `lhs` = value of the StatusOr `expr`, or returns its error.
#define PST_ASSIGN_OR_RETURN(lhs, expr) \
  PST_ASSIGN_OR_RETURN_IMPL_(PST_CONCAT_(pst_statusor_, __LINE__), lhs, expr)
#define PST_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

#endif  // PST_COMMON_STATUS_MACROS_H_
