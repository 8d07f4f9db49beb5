#include "findings/findings.h"

namespace gm::findings {

const char* severity_name(Severity severity) {
  switch (severity) {
    case Severity::info:
      return "info";
    case Severity::low:
      return "low";
    case Severity::medium:
      return "medium";
    case Severity::high:
      return "high";
  }
  return "info";
}

}  // namespace gm::findings
