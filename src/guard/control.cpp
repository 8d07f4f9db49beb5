// Control datagrams of an attached session (`gpumeter attach`, the IPython extension): notebook cells and
// budget changes, on the same socket as progress (DESIGN §5; docs/notebooks.md).
#include "guard/control.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "guard/guard.h"
#include "util/json_in.h"

namespace gm::guard {
namespace {

constexpr std::size_t kMaxCellSource = 200;

Result<CellEvent> parse_cell(const nlohmann::json& c) {
  if (!c.is_object()) return make_error(ErrorKind::usage, "\"cell\" is not an object");
  CellEvent e;
  const auto id = util::json_int(c, "id");
  if (!id || *id < 0) return make_error(ErrorKind::usage, "\"cell.id\" is not a non-negative integer");
  e.cell_id = *id;
  const auto ev = util::json_string(c, "event");
  if (!ev || (*ev != "start" && *ev != "end"))
    return make_error(ErrorKind::usage, "\"cell.event\" is not \"start\" or \"end\"");
  e.start = *ev == "start";
  if (const nlohmann::json* st = util::json_member(c, "status"); st && !st->is_null()) {
    if (!st->is_string()) return make_error(ErrorKind::usage, "\"cell.status\" is not a string");
    const std::string text = util::json_string(st).value_or("");
    const auto status = util::enum_from_text(store::kCellEndTexts, text);
    if (!status)
      return make_error(ErrorKind::usage, "\"cell.status\" '" + text + "' is not one of " +
                                              util::enum_texts(store::kCellEndTexts));
    e.status = *status;
  }
  if (const nlohmann::json* src = util::json_member(c, "source"); src && !src->is_null()) {
    if (!src->is_string()) return make_error(ErrorKind::usage, "\"cell.source\" is not a string");
    e.source = util::json_string(src).value_or("");
    if (e.source.size() > kMaxCellSource) {
      std::size_t cut = kMaxCellSource;
      while (cut > 0 && (static_cast<unsigned char>(e.source[cut]) & 0xC0) == 0x80) --cut;  // UTF-8 boundary
      e.source.resize(cut);
    }
  }
  return e;
}

Result<StopRequest> parse_stop(const nlohmann::json& st) {
  if (!st.is_object()) return make_error(ErrorKind::usage, "\"control.stop\" is not an object");
  StopRequest r;
  const auto by = util::json_string(st, "by");
  const auto reason = by ? util::enum_from_text(store::kStopReasonTexts, *by) : std::nullopt;
  // Only the askers from outside the run: its own reasons (budget, forecast, target) are its own decisions.
  if (!reason || (*reason != store::StopReason::mcp && *reason != store::StopReason::idle))
    return make_error(ErrorKind::usage, "\"control.stop.by\" is not \"mcp\" or \"idle\"");
  r.by = *reason;
  if (const nlohmann::json* why = util::json_member(st, "reason"); why && !why->is_null()) {
    const auto text = util::json_string(why);
    if (!text) return make_error(ErrorKind::usage, "\"control.stop.reason\" is not a string");
    r.reason = *text;
  }
  if (r.reason.size() > kMaxStopReasonBytes) {
    std::size_t cut = kMaxStopReasonBytes;
    while (cut > 0 && (static_cast<unsigned char>(r.reason[cut]) & 0xC0) == 0x80) --cut;  // UTF-8 boundary
    r.reason.resize(cut);
  }
  return r;
}

}  // namespace

std::string stop_request_datagram(const StopRequest& request) {
  return nlohmann::json(
             {{"control", {{"stop", {{"by", util::text_of(request.by)}, {"reason", request.reason}}}}}})
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string budget_datagram(MicroUsd budget_micros, std::string_view by) {
  return nlohmann::json(
             {{"control", {{"budget_usd", util::usd_decimal(budget_micros)}, {"by", std::string(by)}}}})
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Result<void> send_control_datagram(const std::string& socket_path, std::string_view datagram) {
  sockaddr_un addr{};
  if (socket_path.empty() || socket_path.size() >= sizeof addr.sun_path)
    return make_error(ErrorKind::unavailable, "the run's socket path '" + socket_path + "' is not usable");
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return make_error(ErrorKind::unavailable, std::string("socket: ") + std::strerror(errno));
  const ssize_t n = ::sendto(fd, datagram.data(), datagram.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
                             reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  const int err = errno;
  ::close(fd);
  if (n == static_cast<ssize_t>(datagram.size())) return ok_result();
  std::string why = n < 0 ? std::strerror(err) : "the datagram was cut short";
  if (n < 0 && (err == EACCES || err == EPERM)) why += " (the socket's folder belongs to the run's user)";
  if (n < 0 && (err == ENOENT || err == ECONNREFUSED)) why += " (the run has ended)";
  return make_error(ErrorKind::unavailable, "the run's socket " + socket_path + ": " + why);
}

std::optional<Result<SessionControl>> parse_session_control(std::string_view datagram) {
  // Cheap test first: progress datagrams arrive often and never carry these keys.
  if (datagram.find("\"cell\"") == std::string_view::npos &&
      datagram.find("\"control\"") == std::string_view::npos)
    return std::nullopt;
  auto parsed = util::json_parse(datagram, "control");
  if (!parsed || !parsed->is_object()) return std::nullopt;  // progress parsing names the problem
  const nlohmann::json* cell = util::json_member(*parsed, "cell");
  const nlohmann::json* control = util::json_member(*parsed, "control");
  if (!cell && !control) return std::nullopt;
  SessionControl out;
  if (cell) {
    auto c = parse_cell(*cell);
    if (!c) return Result<SessionControl>(c.error());
    out.cell = *c;
  }
  if (control) {
    if (!control->is_object())
      return Result<SessionControl>(make_error(ErrorKind::usage, "\"control\" is not an object"));
    if (const nlohmann::json* b = util::json_member(*control, "budget_usd")) {
      // Exactly as --budget: a number's decimal text, or a string ("12.50"), through the one parser.
      const auto usd = util::json_number(b);
      const auto text = util::json_string(b);
      Result<MicroUsd> micros = usd    ? util::usd_micros_of_number(*usd)
                                : text ? util::parse_usd_micros(*text)
                                       : Result<MicroUsd>(make_error(ErrorKind::usage, "not a number"));
      const bool zero = usd ? *usd <= 0 : text && text->find_first_of("123456789") == std::string::npos;
      if (!micros || zero)
        return Result<SessionControl>(
            make_error(ErrorKind::usage,
                       "\"control.budget_usd\" is not a positive number of USD (e.g. 40 or \"12.50\")"));
      out.budget_micros = *micros;
      if (*out.budget_micros <= 0)
        return Result<SessionControl>(
            make_error(ErrorKind::usage, "\"control.budget_usd\" is under one micro-dollar"));
    }
    if (const nlohmann::json* by = util::json_member(*control, "by"); by && !by->is_null()) {
      const auto text = util::json_string(by);
      if (!text || text->size() > 64)
        return Result<SessionControl>(make_error(ErrorKind::usage, "\"control.by\" is not a short string"));
      out.by = *text;
    }
    if (const nlohmann::json* st = util::json_member(*control, "stop")) {
      auto stop = parse_stop(*st);
      if (!stop) return Result<SessionControl>(stop.error());
      out.stop = std::move(*stop);
    }
    if (const nlohmann::json* w = util::json_member(*control, "warn_at")) {
      const auto text = util::json_string(w);
      if (!text)
        return Result<SessionControl>(make_error(ErrorKind::usage, "\"control.warn_at\" is not a string"));
      auto pct = parse_warn_at(*text);
      if (!pct) return Result<SessionControl>(pct.error());
      out.warn_at_pct = *pct;
    }
  }
  return Result<SessionControl>(std::move(out));
}

}  // namespace gm::guard
