// Control datagrams of an attached session (`gpumeter attach`, the IPython extension): notebook cells and
// budget changes, on the same socket as progress (DESIGN §5; docs/notebooks.md).
#include <cmath>
#include <nlohmann/json.hpp>

#include "guard/session.h"

namespace gm {
namespace {

constexpr std::size_t kMaxCellSource = 200;

Result<CellEvent> parse_cell(const nlohmann::json& c) {
  if (!c.is_object()) return make_error(ErrorKind::usage, "\"cell\" is not an object");
  CellEvent e;
  auto id = c.find("id");
  if (id == c.end() || !id->is_number_integer() || id->get<std::int64_t>() < 0)
    return make_error(ErrorKind::usage, "\"cell.id\" is not a non-negative integer");
  e.cell_id = id->get<std::int64_t>();
  auto ev = c.find("event");
  if (ev == c.end() || !ev->is_string() || (*ev != "start" && *ev != "end"))
    return make_error(ErrorKind::usage, "\"cell.event\" is not \"start\" or \"end\"");
  e.start = *ev == "start";
  if (auto st = c.find("status"); st != c.end() && !st->is_null()) {
    if (!st->is_string()) return make_error(ErrorKind::usage, "\"cell.status\" is not a string");
    const std::string s = st->get<std::string>();
    if (s != "ok" && s != "error" && s != "interrupted" && s != "refused")
      return make_error(ErrorKind::usage, "\"cell.status\" is not ok, error, interrupted or refused");
    e.status = s;
  }
  if (!e.start && e.status.empty()) e.status = "ok";
  if (auto src = c.find("source"); src != c.end() && !src->is_null()) {
    if (!src->is_string()) return make_error(ErrorKind::usage, "\"cell.source\" is not a string");
    e.source = src->get<std::string>();
    if (e.source.size() > kMaxCellSource) {
      std::size_t cut = kMaxCellSource;
      while (cut > 0 && (static_cast<unsigned char>(e.source[cut]) & 0xC0) == 0x80) --cut;  // UTF-8 boundary
      e.source.resize(cut);
    }
  }
  return e;
}

}  // namespace

std::optional<Result<SessionControl>> parse_session_control(std::string_view datagram) {
  // Cheap test first: progress datagrams arrive often and never carry these keys.
  if (datagram.find("\"cell\"") == std::string_view::npos &&
      datagram.find("\"control\"") == std::string_view::npos)
    return std::nullopt;
  auto j = nlohmann::json::parse(datagram, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;  // progress parsing names the problem
  auto cell = j.find("cell");
  auto control = j.find("control");
  if (cell == j.end() && control == j.end()) return std::nullopt;
  SessionControl out;
  if (cell != j.end()) {
    auto c = parse_cell(*cell);
    if (!c) return Result<SessionControl>(c.error());
    out.cell = *c;
  }
  if (control != j.end()) {
    if (!control->is_object())
      return Result<SessionControl>(make_error(ErrorKind::usage, "\"control\" is not an object"));
    if (auto b = control->find("budget_usd"); b != control->end()) {
      if (!b->is_number() || !std::isfinite(b->get<double>()) || b->get<double>() <= 0)
        return Result<SessionControl>(
            make_error(ErrorKind::usage, "\"control.budget_usd\" is not a positive number"));
      out.budget_micros = usd_to_micros(b->get<double>());  // the wire carries dollars
    }
    if (auto w = control->find("warn_at"); w != control->end()) {
      if (!w->is_string())
        return Result<SessionControl>(make_error(ErrorKind::usage, "\"control.warn_at\" is not a string"));
      auto pct = parse_warn_at(w->get<std::string>());
      if (!pct) return Result<SessionControl>(pct.error());
      out.warn_at_pct = *pct;
    }
  }
  return Result<SessionControl>(std::move(out));
}

}  // namespace gm
