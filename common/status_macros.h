// Status plumbing for every component: return early on an error, unwrap a StatusOr.
//
//   LF_RETURN_IF_ERROR(expr);          // expr is an absl::Status; a non-OK one is returned
//   LF_ASSIGN_OR_RETURN(T x, expr);    // expr is an absl::StatusOr<T>; x holds the value,
//                                      // a non-OK status is returned as it is
//
// Both evaluate `expr` exactly once and work in any function returning absl::Status or
// absl::StatusOr<U>. LF_ASSIGN_OR_RETURN expands to several statements: use it at block
// scope, not as the body of an unbraced if/else.
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define LF_CONCAT_INNER(a, b) a##b
#define LF_CONCAT(a, b) LF_CONCAT_INNER(a, b)

#define LF_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::absl::Status lf_status_ = (expr);      \
    if (!lf_status_.ok()) return lf_status_; \
  } while (0)

#define LF_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(*tmp)

#define LF_ASSIGN_OR_RETURN(lhs, expr) \
  LF_ASSIGN_OR_RETURN_IMPL(LF_CONCAT(lf_statusor_, __LINE__), lhs, expr)
