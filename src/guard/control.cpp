// Control datagrams of an attached session (`gpumeter attach`, the IPython extension): notebook cells and
// budget changes, on the same socket as progress (DESIGN §5; docs/notebooks.md).
#include "guard/control.h"

#include <cmath>

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

}  // namespace

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
