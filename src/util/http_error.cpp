#include "util/http_error.h"

#include <httplib.h>

namespace gm {

std::string http_error_text(httplib::Error error) {
  switch (error) {
    case httplib::Error::Connection:
      return "cannot connect (nothing listening, or the host is unreachable)";
    case httplib::Error::ConnectionTimeout:
      return "connection timed out";
    case httplib::Error::Read:
      return "the connection broke while reading the answer (or it timed out)";
    case httplib::Error::Write:
      return "the connection broke while sending the request";
    case httplib::Error::SSLConnection:
      return "TLS handshake failed";
    case httplib::Error::SSLLoadingCerts:
      return "cannot load the CA certificates";
    case httplib::Error::SSLServerVerification:
      return "the server's TLS certificate could not be verified";
    case httplib::Error::ExceedRedirectCount:
      return "too many redirects";
    case httplib::Error::Canceled:
      return "request cancelled";
    default:
      return "request failed (" + httplib::to_string(error) + ")";
  }
}

}  // namespace gm
