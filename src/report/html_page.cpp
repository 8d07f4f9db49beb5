#include "report/html_page.h"

#include <fmt/format.h>

#include <map>

#include "util/embedded.h"
#include "util/json_in.h"
#include "util/units.h"

namespace gm::report::html {

namespace {

std::string escape_text(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

/// JSON text safe inside a <script> element: "</" and "<!--" cannot appear ("<" is escaped as \u003c).
std::string script_safe_json(const nlohmann::json& j) {
  std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '<')
      out += "\\u003c";
    else
      out += c;
  }
  return out;
}

}  // namespace

Result<std::string> page(const nlohmann::json& spec) {
  auto js = util::embedded_file("uPlot.iife.min.js");
  auto css = util::embedded_file("uPlot.min.css");
  auto page_js = util::embedded_file("report.js");
  auto page_css = util::embedded_file("report.css");
  if (!page_js || !page_css)
    return make_error("the page script (web/src/report.js, report.css) is not embedded in this build");
  if (!js || !css)
    return make_error(
        "the charting library (uPlot) is not embedded in this build: run scripts/setup.sh "
        "(npm ci and web/build-assets.sh) and rebuild");
  std::string title = util::json_string(spec, "title").value_or("gpumeter");
  std::string out;
  out.reserve(js->size() + 4096);
  out += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out +=
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; script-src "
      "'unsafe-inline'; "
      "style-src 'unsafe-inline'; img-src data:\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += "<title>" + escape_text(title) + "</title>\n<style>\n";
  out += *css;
  out += *page_css;
  out += "</style>\n</head>\n<body>\n<div id=\"gm-root\"></div>\n<pre id=\"gm-status\">pending</pre>\n";
  out += "<script type=\"application/json\" id=\"gm-data\">" + script_safe_json(spec) + "</script>\n";
  if (auto license = util::embedded_file("uPlot.LICENSE")) {
    std::string text(*license);
    for (std::size_t p = text.find("--"); p != std::string::npos; p = text.find("--", p))
      text.replace(p, 2, "- ");
    out += "<!-- Charts by uPlot, bundled under its license:\n" + text + "-->\n";
  }
  out += "<script>\n";
  out += *js;
  out += "\n</script>\n<script>";
  out += *page_js;
  out += "</script>\n</body>\n</html>\n";
  return out;
}

nlohmann::json line_chart(const std::string& id, const std::string& title, const std::string& x_label,
                          const std::string& y_label, const std::vector<double>& x, nlohmann::json series) {
  return {{"id", id},
          {"title", title},
          {"kind", "line"},
          {"x_label", x_label},
          {"y_label", y_label},
          {"x", x},
          {"series", std::move(series)}};
}

nlohmann::json bar_chart(const std::string& id, const std::string& title, const std::string& y_label,
                         const std::vector<std::string>& categories, const std::vector<double>& values,
                         const std::string& series_label) {
  return {{"id", id},
          {"title", title},
          {"kind", "bars"},
          {"y_label", y_label},
          {"categories", categories},
          {"series", nlohmann::json::array({{{"label", series_label}, {"values", values}}})}};
}

nlohmann::json hbar_chart(const std::string& id, const std::string& title,
                          const std::vector<std::string>& categories, const std::vector<double>& values,
                          const std::string& series_label, const std::vector<std::string>& value_text,
                          const std::vector<std::string>& hover) {
  nlohmann::json chart = {{"id", id},
                          {"title", title},
                          {"kind", "hbars"},
                          {"categories", categories},
                          {"value_text", value_text},
                          {"series", nlohmann::json::array({{{"label", series_label}, {"values", values}}})}};
  if (!hover.empty()) chart["hover"] = hover;
  return chart;
}

nlohmann::json stacked_chart(const std::string& id, const std::string& title, const std::string& unit,
                             const std::vector<std::string>& categories,
                             const std::vector<std::string>& series,
                             const std::vector<std::vector<double>>& values) {
  auto arr = nlohmann::json::array();
  for (std::size_t s = 0; s < series.size() && s < values.size(); ++s)
    arr.push_back({{"label", series[s]}, {"values", values[s]}});
  return {{"id", id},     {"title", title},           {"kind", "stacked"},
          {"unit", unit}, {"categories", categories}, {"series", arr}};
}

nlohmann::json timeline_chart(const std::string& id, const std::string& title, std::int64_t window_ns,
                              const std::vector<TimelineItem>& items) {
  // Compact: lanes and names once, each activity as [lane, start_ns, dur_ns, class, name].
  const std::vector<std::string> classes = {"compute", "communication", "memory"};
  std::map<std::string, std::size_t> lane_ids, name_ids;
  std::vector<std::string> lanes, names;
  for (const auto& it : items)
    if (lane_ids.emplace(it.lane, 0).second) lanes.push_back(it.lane);
  std::sort(lanes.begin(), lanes.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;  // stream 7 before stream 13
  });
  for (std::size_t i = 0; i < lanes.size(); ++i) lane_ids[lanes[i]] = i;
  auto spans = nlohmann::json::array();
  for (const auto& it : items) {
    auto [n, fresh] = name_ids.emplace(it.name, names.size());
    if (fresh) names.push_back(it.name);
    auto k = std::find(classes.begin(), classes.end(), it.klass) - classes.begin();
    if (k >= static_cast<std::ptrdiff_t>(classes.size())) k = 0;  // an unknown class is drawn as compute
    spans.push_back({lane_ids[it.lane], it.start_ns, it.dur_ns, k, n->second});
  }
  std::vector<std::string> lane_labels;
  for (const auto& l : lanes)
    lane_labels.push_back(l.empty() ? "(no stream)" : l.rfind("stream", 0) == 0 ? l : "stream " + l);
  return {{"id", id},
          {"title", title},
          {"kind", "timeline"},
          {"window_ns", window_ns},
          {"lanes", lane_labels},
          {"classes", classes},
          {"names", names},
          {"spans", spans},
          {"series", nlohmann::json::array(
                         {{{"label", "compute"}}, {{"label", "communication"}}, {{"label", "memory"}}})}};
}

void add_finding_cards(nlohmann::json& cards, const std::vector<findings::Finding>& fs,
                       const std::string& where) {
  for (const auto& f : fs) {
    std::string money;
    if (f.nano_usd_per_month) money = util::format_nanos(*f.nano_usd_per_month) + "/month at this rate";
    if (f.nano_usd_per_1k_steps)
      money += (money.empty() ? "" : ", ") + util::format_nanos(*f.nano_usd_per_1k_steps) + " per 1k steps";
    if (money.empty() && f.cost_nano_usd) money = util::format_nanos(*f.cost_nano_usd);
    cards.push_back({{"severity", findings::severity_name(f.severity)},
                     {"kind", f.kind},
                     {"where", where},
                     {"summary", f.summary},
                     {"money", money},
                     {"action", f.action}});
  }
}

}  // namespace gm::report::html
