#pragma once
// Result<T>: a value or an Error. GCC 12 has no std::expected in C++20.
#include <string>
#include <utility>
#include <variant>

namespace gm::util {

/// Error categories; the CLI maps them to exit codes (see util/exit_codes.h).
enum class ErrorKind {
  failure,         ///< something went wrong at run time (I/O, parse of a file, NVML)
  usage,           ///< bad flag or argument value
  not_found,       ///< an unknown run, GPU, offer, model...
  no_gpu_library,  ///< no GPU management library (NVML) could be loaded or initialised
  unavailable,     ///< a resource exists but cannot be used now (locked ledger, unreachable server)
};

/// An error with a message that names the file, line, byte offset or flag it is about.
struct Error {
  ErrorKind kind = ErrorKind::failure;
  std::string message;
};

/// Makes an Error of kind failure.
inline Error make_error(std::string message) {
  return Error{ErrorKind::failure, std::move(message)};
}
/// Makes an Error of the given kind.
inline Error make_error(ErrorKind kind, std::string message) {
  return Error{kind, std::move(message)};
}

/// A value of type T or an Error.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}      // NOLINT: implicit by design
  Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT
  /// True when a value is held.
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  /// The value; only call when ok().
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  /// The error; only call when !ok().
  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

/// Result of an operation with no value.
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : err_(std::move(error)), ok_(false) {}  // NOLINT
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return err_; }

 private:
  Error err_;
  bool ok_ = true;
};

/// A successful Result<void>.
inline Result<void> ok_result() {
  return Result<void>();
}

}  // namespace gm::util

// The vocabulary every module returns and checks: re-exported into gm so that `Result<T>`, `Error` and
// `make_error` read the same in every module (the one header allowed to, see scripts/check_layers.py).
namespace gm {
using util::Error;
using util::ErrorKind;
using util::make_error;
using util::ok_result;
using util::Result;
}  // namespace gm

/// Propagates an error from a Result-returning expression: GM_TRY(auto x, f());
#define GM_CONCAT_INNER(a, b) a##b
#define GM_CONCAT(a, b) GM_CONCAT_INNER(a, b)
#define GM_TRY(decl, expr)                                                        \
  auto GM_CONCAT(gm_try_, __LINE__) = (expr);                                     \
  if (!GM_CONCAT(gm_try_, __LINE__)) return GM_CONCAT(gm_try_, __LINE__).error(); \
  decl = std::move(GM_CONCAT(gm_try_, __LINE__)).value()  // NOLINT(bugprone-macro-parentheses): decl declares
/// Propagates an error from a Result<void> expression.
#define GM_TRY_VOID(expr)                   \
  do {                                      \
    auto gm_try_v = (expr);                 \
    if (!gm_try_v) return gm_try_v.error(); \
  } while (0)
