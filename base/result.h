// mocker::Result<T> — a value or an Error, for operations on untrusted input (network frames,
// trace files, TOML, CLI). Modelled on std::expected (C++23) so that switching later is an alias
// change: has_value(), value(), error(), operator bool, operator*, operator->.
//
// Expected simulation outcomes (no free blocks, cancel of an unknown id) are NOT errors: they use
// ordinary typed returns. Broken invariants use MOCKER_CHECK (check.h).
//
// Thread-compatible value type; header-only, no dependencies beyond the standard library.
#pragma once

#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "base/check.h"
#include "base/enum_names.h"

namespace mocker {

/// Error categories, leveldb-style.
enum class ErrorCode {
  InvalidArgument,    ///< the caller passed something out of range / ill-formed
  Corruption,         ///< bytes or text that do not decode (truncated, wrong type, ...)
  NotFound,           ///< a named thing does not exist (file, key)
  Unsupported,        ///< well-formed but not supported by this version
  IoError,            ///< the operating system refused (open, read)
  Internal,           ///< a bug surfaced as data rather than an abort
  PermissionDenied,   ///< the caller is not allowed to do this (another client's request)
  ResourceExhausted,  ///< memory ran out or a configured limit is reached; may succeed later
};

/// Lower-case names of the error codes ("invalid_argument", ...).
inline constexpr EnumNames<ErrorCode, 8> kErrorCodeNames{{
    {"invalid_argument", ErrorCode::InvalidArgument},
    {"corruption", ErrorCode::Corruption},
    {"not_found", ErrorCode::NotFound},
    {"unsupported", ErrorCode::Unsupported},
    {"io_error", ErrorCode::IoError},
    {"internal", ErrorCode::Internal},
    {"permission_denied", ErrorCode::PermissionDenied},
    {"resource_exhausted", ErrorCode::ResourceExhausted},
}};

/// Lower-case name of an error code ("invalid_argument", ...); NUL-terminated.
constexpr const char* errorCodeName(ErrorCode code) {
  return enumName(kErrorCodeNames, code).data();
}

/// An error: a category plus a human-readable message that names what is wrong.
struct Error {
  ErrorCode code = ErrorCode::InvalidArgument;
  std::string message;

  /// "invalid_argument: block_size must be >= 1 (got 0)".
  std::string toString() const { return std::string(errorCodeName(code)) + ": " + message; }

  /// Returns a copy whose message is prefixed with `context + ": "` (for nested fields).
  Error withContext(const std::string& context) const {
    return Error{code, context + ": " + message};
  }

  friend bool operator==(const Error&, const Error&) = default;
};

/// Convenience constructors.
inline Error invalidArgument(std::string message) {
  return Error{ErrorCode::InvalidArgument, std::move(message)};
}
inline Error corruption(std::string message) {
  return Error{ErrorCode::Corruption, std::move(message)};
}

/// A value of type T or an Error. [[nodiscard]]: ignoring a Result is a bug.
template <typename T>
class [[nodiscard]] Result {
 public:
  using value_type = T;

  Result(const T& value) : storage_(std::in_place_index<0>, value) {}          // NOLINT(implicit)
  Result(T&& value) : storage_(std::in_place_index<0>, std::move(value)) {}    // NOLINT
  Result(Error error) : storage_(std::in_place_index<1>, std::move(error)) {}  // NOLINT

  bool has_value() const { return storage_.index() == 0; }
  explicit operator bool() const { return has_value(); }

  // REQUIRES: has_value().
  T& value() & {
    MOCKER_CHECK(has_value());
    return std::get<0>(storage_);
  }
  const T& value() const& {
    MOCKER_CHECK(has_value());
    return std::get<0>(storage_);
  }
  T&& value() && {
    MOCKER_CHECK(has_value());
    return std::get<0>(std::move(storage_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  // REQUIRES: !has_value().
  const Error& error() const {
    MOCKER_CHECK(!has_value());
    return std::get<1>(storage_);
  }

 private:
  std::variant<T, Error> storage_;
};

/// Result of an operation that produces no value.
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT(implicit)

  bool has_value() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const {
    MOCKER_CHECK(!ok_);
    return error_;
  }

 private:
  Error error_;
  bool ok_ = true;
};

using Status = Result<void>;

}  // namespace mocker

/// Propagates an error: `MOCKER_TRY(auto x, parse(...));` or `MOCKER_TRY_VOID(validate());`.
#define MOCKER_DETAIL_CONCAT2(a, b) a##b
#define MOCKER_DETAIL_CONCAT(a, b) MOCKER_DETAIL_CONCAT2(a, b)
#define MOCKER_TRY(decl, expr) MOCKER_DETAIL_TRY(decl, expr, MOCKER_DETAIL_CONCAT(try_, __LINE__))
#define MOCKER_DETAIL_TRY(decl, expr, tmp) \
  auto tmp = (expr);                       \
  if (!tmp) return tmp.error();            \
  decl = std::move(tmp).value()
#define MOCKER_TRY_VOID(expr)                                   \
  do {                                                          \
    auto mocker_try_status_ = (expr);                           \
    if (!mocker_try_status_) return mocker_try_status_.error(); \
  } while (false)
