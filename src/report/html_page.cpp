#include "report/html_page.h"

#include "util/embedded.h"

namespace gm::html {

namespace {

// Draws every chart of the spec with uPlot, then writes #gm-status: per chart the pixels each series drew
// (counted on the canvas by the series' own colour), the count of resources fetched and of script errors.
constexpr const char* kScript = R"js(
(function () {
  'use strict';
  var palette = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf'];
  var errors = [];
  window.addEventListener('error', function (e) { errors.push(String(e.message || e)); });
  var spec = JSON.parse(document.getElementById('gm-data').textContent);
  var root = document.getElementById('gm-root');
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function rgb(hex) { return [parseInt(hex.substr(1, 2), 16), parseInt(hex.substr(3, 2), 16), parseInt(hex.substr(5, 2), 16)]; }
  var scratch = document.createElement('canvas');
  var scratchCtx = scratch.getContext('2d', { willReadFrequently: true });
  function countColour(canvas, c) {
    scratch.width = canvas.width;
    scratch.height = canvas.height;
    scratchCtx.clearRect(0, 0, scratch.width, scratch.height);
    scratchCtx.drawImage(canvas, 0, 0);
    var d = scratchCtx.getImageData(0, 0, scratch.width, scratch.height).data, n = 0;
    for (var i = 0; i < d.length; i += 4)
      if (d[i + 3] >= 250 && Math.abs(d[i] - c[0]) <= 6 && Math.abs(d[i + 1] - c[1]) <= 6 && Math.abs(d[i + 2] - c[2]) <= 6) n++;
    return n;
  }
  function fmt(v) {
    if (v === null || v === undefined) return '';
    var a = Math.abs(v);
    if (a >= 1000) return v.toFixed(0);
    if (a >= 10) return v.toFixed(1);
    if (a >= 1) return v.toFixed(2);
    return v.toPrecision(2);
  }
  var header = el('header');
  header.appendChild(el('h1', null, spec.title));
  if (spec.subtitle) header.appendChild(el('p', 'sub', spec.subtitle));
  root.appendChild(header);
  if (spec.cards && spec.cards.length) {
    var row = el('div', 'cards');
    spec.cards.forEach(function (c) {
      var card = el('div', 'card' + (c.tone ? ' ' + c.tone : ''));
      card.appendChild(el('div', 'card-value', c.value));
      card.appendChild(el('div', 'card-label', c.label));
      row.appendChild(card);
    });
    root.appendChild(row);
  }
  if (spec.summary && spec.summary.length) {
    var dl = el('dl', 'summary');
    spec.summary.forEach(function (kv) { dl.appendChild(el('dt', null, kv[0])); dl.appendChild(el('dd', null, kv[1])); });
    root.appendChild(dl);
  }
  (spec.findings || []).forEach(function (f) {
    var card = el('section', 'finding ' + f.severity);
    card.appendChild(el('h3', null, f.severity + ' \u00b7 ' + f.kind + (f.where ? ' \u00b7 ' + f.where : '')));
    card.appendChild(el('p', null, f.summary + (f.money ? ' \u2014 ' + f.money : '')));
    card.appendChild(el('p', 'action', '\u2192 ' + f.action));
    root.appendChild(card);
  });
  (spec.notes || []).forEach(function (n) { root.appendChild(el('p', 'note', n)); });
  var drawn = [];
  var hbars = [];
  (spec.charts || []).forEach(function (ch) {
    var box = el('section', 'chart');
    box.id = 'chart-' + ch.id;
    box.appendChild(el('h2', null, ch.title));
    root.appendChild(box);
    if (ch.kind === 'hbars') {
      // Horizontal bars in HTML: full names (ellipsis, whole name on hover), no labels to collide.
      var s0 = ch.series[0], max = 0;
      s0.values.forEach(function (v) { if (v > max) max = v; });
      var list = el('div', 'hbars'), bars = [];
      ch.categories.forEach(function (c, i) {
        var row = el('div', 'hbar');
        var name = el('span', 'lbl', c);
        name.title = c;
        var track = el('span', 'track'), bar = el('span', 'bar');
        bar.style.width = (max > 0 ? Math.max(0.5, 100 * s0.values[i] / max) : 0) + '%';
        bar.style.background = palette[0];
        track.appendChild(bar);
        row.appendChild(name);
        row.appendChild(track);
        row.appendChild(el('span', 'val', (ch.value_text && ch.value_text[i]) || fmt(s0.values[i])));
        list.appendChild(row);
        bars.push(bar);
      });
      box.appendChild(list);
      hbars.push({ spec: ch, bars: bars });
      return;
    }
    var bars = ch.kind === 'bars';
    var xs = bars ? ch.categories.map(function (_, i) { return i; }) : ch.x;
    var data = [xs], series = [{ label: bars ? 'category' : ch.x_label }];
    ch.series.forEach(function (s, i) {
      var colour = palette[i % palette.length];
      data.push(s.values);
      var o = { label: s.label, stroke: colour, width: 2, spanGaps: false, points: { show: false } };
      if (s.dash) o.dash = [8, 6];
      if (bars) { o.fill = colour; o.paths = uPlot.paths.bars({ size: [0.6, 80] }); }
      series.push(o);
    });
    var axes = [
      { label: bars ? '' : ch.x_label },
      { label: ch.y_label, size: 70, values: function (u, v) { return v.map(fmt); } }
    ];
    var scales = { x: { time: false } };
    if (bars) {
      scales.x.range = [-0.5, ch.categories.length - 0.5];
      axes[0].splits = function () { return xs; };
      axes[0].values = function (u, v) { return v.map(function (i) { var c = ch.categories[i]; return c === undefined ? '' : (c.length > 18 ? c.substr(0, 17) + '\u2026' : c); }); };
      axes[0].rotate = 0;
      scales.y = { range: function (u, lo, hi) { return [0, hi > 0 ? hi * 1.1 : 1]; } };
    }
    var opts = { width: 880, height: 260, series: series, axes: axes, scales: scales, legend: { show: true },
                 cursor: { show: !bars }, hooks: {} };
    var plot = new uPlot(opts, data, box);
    drawn.push({ spec: ch, plot: plot });
  });
  (spec.tables || []).forEach(function (t) {
    var sec = el('section', 'table');
    sec.appendChild(el('h2', null, t.title));
    var table = el('table'), tr = el('tr');
    table.appendChild(tr);
    var rows = t.rows.map(function (r) {
      var row = el('tr');
      r.forEach(function (c) { row.appendChild(el('td', null, c)); });
      table.appendChild(row);
      return { cells: r, node: row };
    });
    // Click a heading to sort by that column (numbers by value: $, %, units and separators ignored).
    function key(text) {
      var n = parseFloat(String(text).replace(/[$,%+\s]|ms|GiB|kWh|kg/g, ''));
      return isNaN(n) ? String(text).toLowerCase() : n;
    }
    t.header.forEach(function (h, col) {
      var th = el('th', 'sortable', h), down = false;
      th.title = 'sort by ' + h;
      th.addEventListener('click', function () {
        down = !down;
        rows.sort(function (a, b) {
          var x = key(a.cells[col]), y = key(b.cells[col]);
          var c = typeof x === typeof y ? (x < y ? -1 : x > y ? 1 : 0) : (typeof x === 'number' ? -1 : 1);
          return down ? -c : c;
        });
        rows.forEach(function (r) { table.appendChild(r.node); });
      });
      tr.appendChild(th);
    });
    sec.appendChild(table);
    root.appendChild(sec);
  });
  // Test hook (page opened with #selftest): click the first numeric column of the first table with two or
  // more rows and check the rows come out in descending order.
  function sortCheck() {
    var tables = document.querySelectorAll('section.table table');
    for (var t = 0; t < tables.length; t++) {
      var trs = tables[t].querySelectorAll('tr');
      if (trs.length < 3) continue;
      var ths = trs[0].querySelectorAll('th');
      for (var col = 0; col < ths.length; col++) {
        var num = function (tr) { return parseFloat(tr.children[col].textContent.replace(/[$,%+\s]|ms|GiB|kWh|kg/g, '')); };
        var numeric = true;
        for (var r = 1; r < trs.length; r++) if (isNaN(num(trs[r]))) numeric = false;
        if (!numeric) continue;
        ths[col].click();
        var now = tables[t].querySelectorAll('tr');
        for (var k = 2; k < now.length; k++) if (num(now[k]) > num(now[k - 1])) return 'unsorted';
        return 'ok';
      }
    }
    return 'no numeric table';
  }
  function report() {
    var lines = [];
    drawn.forEach(function (d) {
      var canvas = d.plot.ctx.canvas, parts = [];
      d.spec.series.forEach(function (s, i) {
        parts.push(s.label + ':' + countColour(canvas, rgb(palette[i % palette.length])));
      });
      lines.push('chart=' + d.spec.id + ' points=' + d.plot.data[0].length + ' series=' + parts.join(','));
    });
    hbars.forEach(function (h) {
      var px = 0;
      h.bars.forEach(function (b) { var r = b.getBoundingClientRect(); px += Math.round(r.width * r.height); });
      lines.push('chart=' + h.spec.id + ' points=' + h.bars.length + ' series=' + h.spec.series[0].label + ':' + px);
    });
    // Text labels that overlap another label (bar names, values, headings, summary and table cells).
    var labels = Array.prototype.slice.call(document.querySelectorAll('.lbl, .val, h1, h2, h3, dt, dd, th, td, .card-value, .card-label'));
    var rects = labels.map(function (n) { return n.getBoundingClientRect(); }), overlaps = 0;
    for (var i = 0; i < rects.length; i++)
      for (var j = i + 1; j < rects.length; j++) {
        var a = rects[i], b = rects[j];
        if (a.width === 0 || b.width === 0 || labels[i].contains(labels[j]) || labels[j].contains(labels[i])) continue;
        if (a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1) overlaps++;
      }
    lines.push('label_overlaps=' + overlaps);
    lines.push('cards=' + document.querySelectorAll('.card').length);
    lines.push('sortable_columns=' + document.querySelectorAll('th.sortable').length);
    if (location.hash === '#selftest') lines.push('sort_check=' + sortCheck());
    var resources = (performance.getEntriesByType ? performance.getEntriesByType('resource').length : 0);
    lines.push('resources=' + resources);
    lines.push('errors=' + errors.length + (errors.length ? ' ' + errors.join(' | ') : ''));
    lines.push('done');
    document.getElementById('gm-status').textContent = lines.join('\n');
  }
  if (document.readyState === 'complete') setTimeout(report, 0);
  else window.addEventListener('load', function () { setTimeout(report, 0); });
})();
)js";

constexpr const char* kStyle = R"css(
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; background: #fff; max-width: 960px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 24px 0 8px; }
.sub { color: #555; margin: 0 0 12px; } .note { color: #8a5300; background: #fff7e6; padding: 6px 10px; }
dl.summary { display: grid; grid-template-columns: minmax(120px, max-content) minmax(45%, 1fr); gap: 2px 16px; }
dl.summary dt { overflow-wrap: anywhere; }
dl.summary dt { color: #555; } dl.summary dd { margin: 0; font-variant-numeric: tabular-nums; }
table { border-collapse: collapse; } th.sortable { cursor: pointer; } th.sortable:hover { background: #eef1f4; } th, td { padding: 3px 10px; border-bottom: 1px solid #ddd; text-align: left; }
td { font-variant-numeric: tabular-nums; } #gm-status { display: none; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 8px 0 14px; }
.card { border: 1px solid #dde3e8; border-radius: 6px; padding: 8px 14px; min-width: 110px; background: #fbfcfd; }
.card-value { font-size: 20px; font-weight: 600; font-variant-numeric: tabular-nums; }
.card-label { color: #555; font-size: 12px; } .card.bad .card-value { color: #c62828; } .card.good .card-value { color: #2e7d32; }
.hbars { display: grid; gap: 3px; } .hbar { display: grid; grid-template-columns: 340px 1fr 90px; gap: 8px; align-items: center; }
.hbar .lbl { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; font-family: ui-monospace, monospace; font-size: 12px; }
.hbar .track { background: #eef1f4; height: 14px; } .hbar .bar { display: block; height: 14px; }
.hbar .val { text-align: right; font-variant-numeric: tabular-nums; }
.finding { border-left: 4px solid #607d8b; background: #f7f9fa; padding: 6px 12px; margin: 10px 0; }
.finding h3 { font-size: 14px; margin: 0 0 2px; text-transform: none; } .finding p { margin: 2px 0; }
.finding.high { border-color: #c62828; } .finding.medium { border-color: #ef6c00; }
.finding.low { border-color: #f9a825; } .finding .action { color: #1b5e20; }
)css";

std::string escape_text(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
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
    if (c == '<') out += "\\u003c";
    else out += c;
  }
  return out;
}

}  // namespace

Result<std::string> page(const nlohmann::json& spec) {
  auto js = embedded_file("uPlot.iife.min.js");
  auto css = embedded_file("uPlot.min.css");
  if (!js || !css)
    return make_error("the charting library (uPlot) is not embedded in this build: run scripts/setup.sh "
                      "(npm ci and web/build-assets.sh) and rebuild");
  std::string title = spec.contains("title") && spec["title"].is_string() ? spec["title"].get<std::string>() : "gpumeter";
  std::string out;
  out.reserve(js->size() + 4096);
  out += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out += "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; script-src 'unsafe-inline'; "
         "style-src 'unsafe-inline'; img-src data:\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += "<title>" + escape_text(title) + "</title>\n<style>\n";
  out += *css;
  out += kStyle;
  out += "</style>\n</head>\n<body>\n<div id=\"gm-root\"></div>\n<pre id=\"gm-status\">pending</pre>\n";
  out += "<script type=\"application/json\" id=\"gm-data\">" + script_safe_json(spec) + "</script>\n";
  if (auto license = embedded_file("uPlot.LICENSE")) {
    std::string text(*license);
    for (std::size_t p = text.find("--"); p != std::string::npos; p = text.find("--", p)) text.replace(p, 2, "- ");
    out += "<!-- Charts by uPlot, bundled under its license:\n" + text + "-->\n";
  }
  out += "<script>\n";
  out += *js;
  out += "\n</script>\n<script>";
  out += kScript;
  out += "</script>\n</body>\n</html>\n";
  return out;
}

nlohmann::json line_chart(const std::string& id, const std::string& title, const std::string& x_label,
                          const std::string& y_label, const std::vector<double>& x, nlohmann::json series) {
  return {{"id", id}, {"title", title}, {"kind", "line"}, {"x_label", x_label},
          {"y_label", y_label}, {"x", x}, {"series", std::move(series)}};
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
                          const std::string& series_label, const std::vector<std::string>& value_text) {
  return {{"id", id},
          {"title", title},
          {"kind", "hbars"},
          {"categories", categories},
          {"value_text", value_text},
          {"series", nlohmann::json::array({{{"label", series_label}, {"values", values}}})}};
}

}  // namespace gm::html
