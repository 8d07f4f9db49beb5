#pragma once
// Words for cpp-httplib's client errors (its own to_string gives "Connection", "Read", ...). The enum is only
// declared here, so that including this header does not pull in <httplib.h>.
#include <string>

namespace httplib {
enum class Error;
}  // namespace httplib

namespace gm {

/// A user-facing description of a failed HTTP request.
std::string http_error_text(httplib::Error error);

}  // namespace gm
