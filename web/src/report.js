// gpumeter's offline report pages: draws the page spec embedded as JSON (#gm-data) with uPlot and HTML,
// then writes #gm-status for the browser tests: per chart the pixels each series drew, overlapping labels,
// resources fetched and script errors. Inlined into every page at build time (src/report/html_page.cpp).
(function() {
'use strict';
var palette = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf'];
var errors = [];
window.addEventListener('error', function(e) { errors.push(String(e.message || e)); });
var spec = JSON.parse(document.getElementById('gm-data').textContent);
var root = document.getElementById('gm-root');
function el(tag, cls, text) {
  var e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}
function rgb(hex) {
  return [parseInt(hex.substr(1, 2), 16), parseInt(hex.substr(3, 2), 16), parseInt(hex.substr(5, 2), 16)];
}
var scratch = document.createElement('canvas');
var scratchCtx = scratch.getContext('2d', {willReadFrequently: true});
function countColour(canvas, c) {
  scratch.width = canvas.width;
  scratch.height = canvas.height;
  scratchCtx.clearRect(0, 0, scratch.width, scratch.height);
  scratchCtx.drawImage(canvas, 0, 0);
  var d = scratchCtx.getImageData(0, 0, scratch.width, scratch.height).data, n = 0;
  for (var i = 0; i < d.length; i += 4)
    if (d[i + 3] >= 250 && Math.abs(d[i] - c[0]) <= 6 && Math.abs(d[i + 1] - c[1]) <= 6 &&
        Math.abs(d[i + 2] - c[2]) <= 6)
      n++;
  return n;
}
// A series' name for people: "forecast_low_usd" -> "forecast low ($)". The page's status keeps the name.
var units = {usd: '$', pct: '%', w: 'W', gib: 'GiB', ms: 'ms', s: 's', kwh: 'kWh'};
function display(label) {
  var parts = String(label).split('_'), unit = parts.length > 1 ? units[parts[parts.length - 1]] : undefined;
  if (unit) parts.pop();
  return parts.join(' ') + (unit ? ' (' + unit + ')' : '');
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
  spec.cards.forEach(function(c) {
    var card = el('div', 'card' + (c.tone ? ' ' + c.tone : ''));
    card.appendChild(el('div', 'card-value', c.value));
    card.appendChild(el('div', 'card-label', c.label));
    row.appendChild(card);
  });
  root.appendChild(row);
}
if (spec.summary && spec.summary.length) {
  var dl = el('dl', 'summary');
  spec.summary.forEach(function(kv) {
    dl.appendChild(el('dt', null, kv[0]));
    dl.appendChild(el('dd', null, kv[1]));
  });
  root.appendChild(dl);
}
(spec.findings || []).forEach(function(f) {
  var card = el('section', 'finding ' + f.severity);
  card.appendChild(el('h3', null, f.severity + ' \u00b7 ' + f.kind + (f.where ? ' \u00b7 ' + f.where : '')));
  card.appendChild(el('p', null, f.summary + (f.money ? ' \u2014 ' + f.money : '')));
  card.appendChild(el('p', 'action', '\u2192 ' + f.action));
  root.appendChild(card);
});
(spec.notes || []).forEach(function(n) { root.appendChild(el('p', 'note', n)); });
var drawn = [];
var hbars = [];
// Charts drawn in HTML elements (stacked steps, stream timeline): per series the elements it drew.
var htmlCharts = [];
var classColour = {compute: '#1f77b4', communication: '#ff7f0e', memory: '#2ca02c', idle: '#c5ccd3'};
function colourOf(label, i) { return classColour[label] || palette[i % palette.length]; }
function legend(labels) {
  var row = el('div', 'legend');
  labels.forEach(function(l, i) {
    var item = el('span', 'legend-item');
    var sw = el('span', 'swatch');
    sw.style.background = colourOf(l, i);
    item.appendChild(sw);
    item.appendChild(el('span', 'lbl legend-lbl', l));
    row.appendChild(item);
  });
  return row;
}
// Evenly spaced tick labels under a track: at most `most` of them, each centred on its position and
// kept inside the track.
function ticks(track, positions, texts) {
  var axis = el('div', 'axis');
  positions.forEach(function(p, i) {
    var t = el('span', 'lbl tick', texts[i]);
    t.style.left = (100 * p) + '%';
    t.style.transform = p <= 0 ? 'none' : p >= 1 ? 'translateX(-100%)' : 'translateX(-50%)';
    axis.appendChild(t);
  });
  track.appendChild(axis);
}
// Vertical stacked bars in HTML: one column per category, one segment per series, bottom up.
function drawStacked(ch, box) {
  var n = ch.categories.length, max = 0, totals = [];
  for (var c = 0; c < n; c++) {
    var t = 0;
    ch.series.forEach(function(s) { t += Math.max(0, s.values[c] || 0); });
    totals.push(t);
    if (t > max) max = t;
  }
  box.appendChild(legend(ch.series.map(function(s) { return s.label; })));
  var plot = el('div', 'stack-plot');
  plot.appendChild(el('span', 'lbl ymax', fmt(max) + ' ' + ch.unit));
  var cols = el('div', 'stack-cols'), segs = ch.series.map(function() { return []; });
  for (var c2 = 0; c2 < n; c2++) {
    var col = el('div', 'stack-col');
    var tip = ch.categories[c2];
    ch.series.forEach(function(s, si) {
      var v = Math.max(0, s.values[c2] || 0);
      tip += '\n' + s.label + ': ' + fmt(v) + ' ' + ch.unit;
      if (v <= 0 || max <= 0) return;
      var seg = el('div', 'seg');
      seg.style.height = (100 * v / max) + '%';
      seg.style.background = colourOf(s.label, si);
      col.appendChild(seg);
      segs[si].push(seg);
    });
    col.title = tip;
    cols.appendChild(col);
  }
  plot.appendChild(cols);
  box.appendChild(plot);
  var most = Math.min(n, 6), pos = [], texts = [];
  for (var k = 0; k < most; k++) {
    var idx = most === 1 ? 0 : Math.round(k * (n - 1) / (most - 1));
    pos.push(n === 1 ? 0.5 : (idx + 0.5) / n);
    texts.push(ch.categories[idx].replace('ProfilerStep#', '#'));
  }
  var under = el('div', 'stack-axis');
  ticks(under, pos, texts);
  box.appendChild(under);
  htmlCharts.push({
    spec: ch,
    points: n,
    series: ch.series.map(function(s, si) { return {label: s.label, nodes: segs[si]}; })
  });
}
// A timeline in HTML: one lane per stream, activities placed by time, coloured by class.
function drawTimeline(ch, box) {
  box.appendChild(legend(ch.classes));
  var lanes = el('div', 'tl'), nodes = ch.classes.map(function() { return []; }), tracks = [];
  ch.lanes.forEach(function(name) {
    var row = el('div', 'tl-lane');
    row.appendChild(el('span', 'lbl tl-name', name));
    var track = el('div', 'tl-track');
    row.appendChild(track);
    lanes.appendChild(row);
    tracks.push(track);
  });
  var w = ch.window_ns > 0 ? ch.window_ns : 1;
  ch.spans.forEach(function(s) {
    var d = el('div', 'tl-span');
    d.style.left = (100 * s[1] / w) + '%';
    d.style.width = 'max(1px, ' + (100 * s[2] / w) + '%)';
    d.style.background = colourOf(ch.classes[s[3]], s[3]);
    d.title = ch.names[s[4]] + '\n' + ch.classes[s[3]] + ', ' + fmt(s[2] / 1e3) + ' \u00b5s at ' +
        fmt(s[1] / 1e6) + ' ms';
    tracks[s[0]].appendChild(d);
    nodes[s[3]].push(d);
  });
  var axisRow = el('div', 'tl-lane'), spacer = el('span', 'tl-name');
  axisRow.appendChild(spacer);
  var axisTrack = el('div', 'tl-axis');
  var pos = [0, 0.25, 0.5, 0.75, 1];
  ticks(axisTrack, pos, pos.map(function(p) { return fmt(p * w / 1e6) + ' ms'; }));
  axisRow.appendChild(axisTrack);
  lanes.appendChild(axisRow);
  box.appendChild(lanes);
  htmlCharts.push({
    spec: ch,
    points: ch.spans.length,
    series: ch.classes.map(function(c, i) { return {label: c, nodes: nodes[i]}; })
  });
}
(spec.charts || []).forEach(function(ch) {
  var box = el('section', 'chart');
  box.id = 'chart-' + ch.id;
  box.appendChild(el('h2', null, ch.title));
  root.appendChild(box);
  if (ch.kind === 'stacked') {
    drawStacked(ch, box);
    return;
  }
  if (ch.kind === 'timeline') {
    drawTimeline(ch, box);
    return;
  }
  if (ch.kind === 'hbars') {
    // Horizontal bars in HTML: full names (ellipsis, whole name on hover), no labels to collide.
    var s0 = ch.series[0], max = 0;
    s0.values.forEach(function(v) {
      if (v > max) max = v;
    });
    var list = el('div', 'hbars'), bars = [];
    ch.categories.forEach(function(c, i) {
      var row = el('div', 'hbar');
      var name = el('span', 'lbl', c);
      name.title = (ch.hover && ch.hover[i]) || c;
      var track = el('span', 'track'), bar = el('span', 'bar');
      bar.style.width = (max > 0 && s0.values[i] > 0 ? Math.max(0.5, 100 * s0.values[i] / max) : 0) + '%';
      bar.style.background = palette[0];
      track.appendChild(bar);
      row.appendChild(name);
      row.appendChild(track);
      row.appendChild(el('span', 'val', (ch.value_text && ch.value_text[i]) || fmt(s0.values[i])));
      list.appendChild(row);
      bars.push(bar);
    });
    box.appendChild(list);
    hbars.push({spec: ch, bars: bars});
    return;
  }
  var bars = ch.kind === 'bars';
  var xs = bars ? ch.categories.map(function(_, i) { return i; }) : ch.x;
  var data = [xs], series = [{label: bars ? 'category' : ch.x_label}];
  ch.series.forEach(function(s, i) {
    var colour = s.colour || palette[i % palette.length];
    data.push(s.values);
    var o = {label: display(s.label), stroke: colour, width: 2, spanGaps: false, points: {show: false}};
    if (s.dash) o.dash = [8, 6];
    if (s.points_only) {
      o.points = {show: true, size: 6, fill: colour};
      o.paths = function() { return null; };
    }
    if (bars) {
      o.fill = colour;
      o.paths = uPlot.paths.bars({size: [0.6, 80]});
    }
    series.push(o);
  });
  var axes = [
    {label: bars ? '' : ch.x_label},
    {label: ch.y_label, size: 70, values: function(u, v) { return v.map(fmt); }}
  ];
  var scales = {x: {time: false}};
  if (bars) {
    scales.x.range = [-0.5, ch.categories.length - 0.5];
    axes[0].splits = function() { return xs; };
    axes[0].values = function(u, v) {
      return v.map(function(i) {
        var c = ch.categories[i];
        return c === undefined ? '' : (c.length > 18 ? c.substr(0, 17) + '\u2026' : c);
      });
    };
    axes[0].rotate = 0;
    scales.y = {range: function(u, lo, hi) { return [0, hi > 0 ? hi * 1.1 : 1]; }};
  }
  if (!bars && ch.y_label === '%') scales.y = {range: [0, 100]};
  // A shaded band between two series (the forecast's fast and slow ends).
  var bands = [];
  if (ch.band) {
    var up = -1, lo = -1;
    ch.series.forEach(function(s, i) {
      if (s.label === ch.band.upper) up = i + 1;
      if (s.label === ch.band.lower) lo = i + 1;
    });
    if (up > 0 && lo > 0) bands.push({series: [up, lo], fill: 'rgba(255, 127, 14, 0.18)'});
  }
  // The legend names the series; values show on hover only (no "--" placeholders).
  var opts = {
    bands: bands,
    width: 880,
    height: 260,
    series: series,
    axes: axes,
    scales: scales,
    legend: {show: true, live: false},
    cursor: {show: !bars},
    hooks: {}
  };
  // Vertical marks: actions (red, dashed), the first GPU work (orange), round step numbers (grey, dotted).
  var marksDrawn = 0;
  if (ch.marks && ch.marks.length) {
    opts.hooks.draw = [function(u) {
      var ctx = u.ctx;
      marksDrawn = 0;
      ctx.save();
      ch.marks.forEach(function(m) {
        var px = Math.round(u.valToPos(m.x, 'x', true)) + 0.5;
        if (!(px >= u.bbox.left - 1 && px <= u.bbox.left + u.bbox.width + 1)) return;
        var action = m.kind === 'action', startup = m.kind === 'startup';
        ctx.strokeStyle = action ? '#b71c1c' : startup ? '#e67e22' : '#9aa5b1';
        ctx.lineWidth = action || startup ? 2 : 1;
        ctx.setLineDash(action ? [6, 4] : startup ? [] : [2, 4]);
        ctx.beginPath();
        ctx.moveTo(px, u.bbox.top);
        ctx.lineTo(px, u.bbox.top + u.bbox.height);
        ctx.stroke();
        marksDrawn++;
      });
      ctx.restore();
    }];
  }
  var plot = new uPlot(opts, data, box);
  if (ch.marks_note) box.appendChild(el('p', 'chart-note', ch.marks_note));
  plot.marksDrawn = function() { return marksDrawn; };
  drawn.push({spec: ch, plot: plot});
});
(spec.tables || []).forEach(function(t) {
  var sec = el('section', 'table');
  sec.appendChild(el('h2', null, t.title));
  var table = el('table'), tr = el('tr');
  table.appendChild(tr);
  var rows = t.rows.map(function(r) {
    var row = el('tr');
    r.forEach(function(c) { row.appendChild(el('td', null, c)); });
    table.appendChild(row);
    return {cells: r, node: row};
  });
  // Click a heading to sort by that column (numbers by value: $, %, units and separators ignored).
  function key(text) {
    var n = parseFloat(String(text).replace(/[$,%+\s]|ms|GiB|kWh|kg/g, ''));
    return isNaN(n) ? String(text).toLowerCase() : n;
  }
  t.header.forEach(function(h, col) {
    var th = el('th', 'sortable', h), down = false;
    th.title = 'sort by ' + h;
    th.addEventListener('click', function() {
      down = !down;
      rows.sort(function(a, b) {
        var x = key(a.cells[col]), y = key(b.cells[col]);
        var c = typeof x === typeof y ? (x < y ? -1 : x > y ? 1 : 0) : (typeof x === 'number' ? -1 : 1);
        return down ? -c : c;
      });
      rows.forEach(function(r) { table.appendChild(r.node); });
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
      var num = function(
          tr) { return parseFloat(tr.children[col].textContent.replace(/[$,%+\s]|ms|GiB|kWh|kg/g, '')); };
      var numeric = true;
      for (var r = 1; r < trs.length; r++)
        if (isNaN(num(trs[r]))) numeric = false;
      if (!numeric) continue;
      ths[col].click();
      var now = tables[t].querySelectorAll('tr');
      for (var k = 2; k < now.length; k++)
        if (num(now[k]) > num(now[k - 1])) return 'unsorted';
      return 'ok';
    }
  }
  return 'no numeric table';
}
function report() {
  var lines = [];
  drawn.forEach(function(d) {
    var canvas = d.plot.ctx.canvas, parts = [];
    d.spec.series.forEach(function(s, i) {
      parts.push(s.label + ':' + countColour(canvas, rgb(s.colour || palette[i % palette.length])));
    });
    lines.push('chart=' + d.spec.id + ' points=' + d.plot.data[0].length + ' series=' + parts.join(','));
    if (d.spec.marks && d.spec.marks.length) lines.push('marks=' + d.spec.id + ':' + d.plot.marksDrawn());
  });
  hbars.forEach(function(h) {
    var px = 0;
    h.bars.forEach(function(b) {
      var r = b.getBoundingClientRect();
      px += Math.round(r.width * r.height);
    });
    lines.push(
        'chart=' + h.spec.id + ' points=' + h.bars.length + ' series=' + h.spec.series[0].label + ':' + px);
  });
  htmlCharts.forEach(function(h) {
    var parts = h.series.map(function(s) {
      var px = 0;
      s.nodes.forEach(function(n) {
        var r = n.getBoundingClientRect();
        px += Math.round(r.width * r.height);
      });
      return s.label + ':' + px;
    });
    lines.push('chart=' + h.spec.id + ' points=' + h.points + ' series=' + parts.join(','));
  });
  // Text labels that overlap another label (bar names, values, headings, summary and table cells).
  var labels = Array.prototype.slice.call(
      document.querySelectorAll('.lbl, .val, h1, h2, h3, dt, dd, th, td, .card-value, .card-label'));
  var rects = labels.map(function(n) { return n.getBoundingClientRect(); }), overlaps = 0;
  for (var i = 0; i < rects.length; i++)
    for (var j = i + 1; j < rects.length; j++) {
      var a = rects[i], b = rects[j];
      if (a.width === 0 || b.width === 0 || labels[i].contains(labels[j]) || labels[j].contains(labels[i]))
        continue;
      if (a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1)
        overlaps++;
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
if (document.readyState === 'complete')
  setTimeout(report, 0);
else
  window.addEventListener('load', function() { setTimeout(report, 0); });
})();
