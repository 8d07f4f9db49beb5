// Progress intake: datagram messages from the job (the progress protocol, DESIGN §5).
#include <cmath>

#include "guard/guard.h"
#include "util/json_in.h"

namespace gm::guard {
namespace {

Result<std::optional<std::int64_t>> count_field(const nlohmann::json& j, const char* name) {
  const nlohmann::json* it = util::json_member(j, name);
  if (it == nullptr || it->is_null()) return std::optional<std::int64_t>{};
  if (it->is_number_integer() || it->is_number_unsigned()) {
    if (auto v = util::json_int(it)) {
      if (*v < 0) return make_error(ErrorKind::usage, std::string("\"") + name + "\" is negative");
      return std::optional<std::int64_t>(*v);
    }
    return make_error(ErrorKind::usage, std::string("\"") + name + "\" is too large");
  }
  if (it->is_number_float()) {
    const double v = util::json_number(it).value_or(-1);
    if (v < 0 || v != std::floor(v) || v > 9.0e18)
      return make_error(ErrorKind::usage, std::string("\"") + name + "\" is not a non-negative integer");
    return std::optional<std::int64_t>(static_cast<std::int64_t>(v));
  }
  return make_error(ErrorKind::usage, std::string("\"") + name + "\" is not a number");
}

}  // namespace

Result<ProgressUpdate> parse_progress_message(std::string_view datagram) {
  auto parsed = util::json_parse(datagram, "progress");
  if (!parsed) return make_error(ErrorKind::usage, "not valid JSON");
  const nlohmann::json& j = *parsed;
  if (!j.is_object()) return make_error(ErrorKind::usage, "not a JSON object");
  ProgressUpdate u;
  GM_TRY(u.step, count_field(j, "step"));
  GM_TRY(u.total_steps, count_field(j, "total_steps"));
  GM_TRY(u.samples, count_field(j, "samples"));
  GM_TRY(u.tokens, count_field(j, "tokens"));
  if (const nlohmann::json* it = util::json_member(j, "metrics"); it && !it->is_null()) {
    if (!it->is_object()) return make_error(ErrorKind::usage, "\"metrics\" is not an object");
    for (auto& [k, v] : it->items()) {
      if (!v.is_number()) return make_error(ErrorKind::usage, "metric \"" + k + "\" is not a number");
      const auto d = util::json_number(&v);
      if (!d) return make_error(ErrorKind::usage, "metric \"" + k + "\" is not finite");
      u.metrics[k] = *d;
    }
  }
  if (const nlohmann::json* it = util::json_member(j, "flops_per_token"); it && !it->is_null()) {
    const auto f = util::json_number(it);
    if (!f) return make_error(ErrorKind::usage, "\"flops_per_token\" is not a number");
    if (!std::isfinite(*f) || *f <= 0 || *f > 1e18)
      return make_error(ErrorKind::usage, "\"flops_per_token\" is not a positive number of FLOPs");
    u.flops_per_token = *f;
  }
  if (const nlohmann::json* it = util::json_member(j, "checkpoint");
      it && !it->is_null() && util::json_bool(it) != false) {
    const auto path = util::json_string(it);
    if (util::json_bool(it) == true)
      u.checkpoint = "";
    else if (path && path->size() <= 4096)
      u.checkpoint = *path;
    else
      return make_error(ErrorKind::usage, "\"checkpoint\" is not true or a path");
  }
  return u;
}

}  // namespace gm::guard
