// profkit report: the interactive GPU timeline (zoom, pan, hover) and its overview.
// Data: the JSON block #tl-data (profkit/report/interactive_timeline.py).  No library,
// no network, no eval: the page's Content-Security-Policy admits this script by its hash.
(function () {
  "use strict";
  var root = document.getElementById("tl");
  var source = document.getElementById("tl-data");
  if (!root || !source) { return; }
  var data = JSON.parse(source.textContent);
  var LABEL_W = 150, ROW_H = 18, AXIS_H = 22, STEP_H = 16, MIN_SPAN = 1000;
  var n = data.duration.length;
  var start = new Float64Array(n), dur = new Float64Array(n), row = new Int32Array(n);
  var acc = 0;
  for (var i = 0; i < n; i++) {
    acc += data.start_delta[i]; start[i] = acc; dur[i] = data.duration[i]; row[i] = data.row[i];
  }
  // per row: its operations in start order, and the longest one (how far back a hit can start)
  var rows = data.rows.map(function () { return { ops: [], longest: 0 }; });
  for (i = 0; i < n; i++) {
    rows[row[i]].ops.push(i);
    if (dur[i] > rows[row[i]].longest) { rows[row[i]].longest = dur[i]; }
  }
  var steps = data.steps;
  var win = data.window, view = { t0: win[0], t1: win[1] };
  var main = root.querySelector("canvas.tl-main"), over = root.querySelector("canvas.tl-overview");
  var tip = root.querySelector(".tl-tip"), label = root.querySelector(".tl-range");
  var plotTop = AXIS_H + (steps.length ? STEP_H : 0);
  var cssHeight = plotTop + Math.max(1, rows.length) * ROW_H + 4;
  main.style.height = cssHeight + "px";
  root.dataset.rowTop = String(plotTop);
  root.dataset.rowHeight = String(ROW_H);
  root.dataset.labelWidth = String(LABEL_W);

  function fmt(ns) {
    var a = Math.abs(ns);
    if (a >= 1e9) { return (ns / 1e9).toFixed(3) + " s"; }
    if (a >= 1e6) { return (ns / 1e6).toFixed(3) + " ms"; }
    if (a >= 1e3) { return (ns / 1e3).toFixed(2) + " µs"; }
    return Math.round(ns) + " ns";
  }
  function color(i) {
    var kind = data.kinds[data.kind[i]];
    if (kind === "memcpy") { return "#d62728"; }
    if (kind === "memset") { return "#9467bd"; }
    if (kind === "graph") { return "#2a9d8f"; }
    var h = 0, s = data.names[data.name[i]];
    for (var k = 0; k < s.length; k++) { h = (h * 31 + s.charCodeAt(k)) | 0; }
    return "hsl(" + (((h % 360) + 360) % 360) + ",55%,50%)";
  }
  function fit(canvas) {
    var ratio = window.devicePixelRatio || 1, w = canvas.clientWidth, h = canvas.clientHeight;
    if (canvas.width !== Math.round(w * ratio) || canvas.height !== Math.round(h * ratio)) {
      canvas.width = Math.round(w * ratio); canvas.height = Math.round(h * ratio);
    }
    var ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    return { ctx: ctx, w: w, h: h };
  }
  function xOf(t, w) { return LABEL_W + (t - view.t0) / (view.t1 - view.t0) * (w - LABEL_W); }
  function tOf(x, w) { return view.t0 + (x - LABEL_W) / (w - LABEL_W) * (view.t1 - view.t0); }
  function firstEnding(ops, t, longest) {
    // first index in ops whose start >= t - longest: nothing before it reaches t
    var lo = 0, hi = ops.length, bound = t - longest;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (start[ops[mid]] < bound) { lo = mid + 1; } else { hi = mid; } }
    return lo;
  }
  function stepAt(t) {
    for (var s = 0; s < steps.length; s++) { if (steps[s][0] <= t && t < steps[s][1]) { return steps[s]; } }
    return null;
  }
  function ticks(ctx, w) {
    var span = view.t1 - view.t0, raw = span / 8, p = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = raw / p >= 5 ? 5 * p : raw / p >= 2 ? 2 * p : p;
    ctx.fillStyle = "#555"; ctx.strokeStyle = "#e5e5e5"; ctx.font = "11px sans-serif"; ctx.textBaseline = "middle";
    for (var t = Math.ceil(view.t0 / step) * step; t <= view.t1; t += step) {
      var x = xOf(t, w);
      ctx.beginPath(); ctx.moveTo(x, AXIS_H - 4); ctx.lineTo(x, cssHeight); ctx.stroke();
      // seconds with as many decimals as the tick step needs (ns ticks: 9)
      ctx.fillText((t / 1e9).toFixed(Math.min(9, Math.max(0, Math.ceil(-Math.log10(step / 1e9))))) + " s",
                   x + 2, AXIS_H / 2);
    }
  }
  function draw() {
    var c = fit(main), ctx = c.ctx, w = c.w;
    ctx.clearRect(0, 0, w, c.h);
    ticks(ctx, w);
    ctx.save(); ctx.beginPath(); ctx.rect(LABEL_W, 0, w - LABEL_W, c.h); ctx.clip();
    for (var s = 0; s < steps.length; s++) {
      var a = xOf(steps[s][0], w), b = xOf(steps[s][1], w);
      if (b < LABEL_W || a > w) { continue; }
      ctx.fillStyle = s % 2 ? "#f4f6fb" : "#e9eef8";
      ctx.fillRect(a, AXIS_H, b - a, c.h - AXIS_H);
      ctx.strokeStyle = "#7a8bb5"; ctx.beginPath(); ctx.moveTo(a, AXIS_H); ctx.lineTo(a, c.h); ctx.stroke();
      ctx.fillStyle = "#333"; ctx.fillText("step " + steps[s][2], Math.max(a, LABEL_W) + 3, AXIS_H + STEP_H / 2);
    }
    var perPixel = (view.t1 - view.t0) / (w - LABEL_W);
    for (var r = 0; r < rows.length; r++) {
      var ops = rows[r].ops, y = plotTop + r * ROW_H, lastX = -1;
      for (var k = firstEnding(ops, view.t0, rows[r].longest); k < ops.length; k++) {
        var o = ops[k];
        if (start[o] > view.t1) { break; }
        if (start[o] + dur[o] < view.t0) { continue; }
        var x = xOf(start[o], w), width = Math.max(1, dur[o] / perPixel);
        if (width <= 1 && Math.floor(x) === lastX) { continue; }  // one pixel already drawn there
        lastX = Math.floor(x);
        ctx.fillStyle = color(o); ctx.fillRect(x, y + 2, width, ROW_H - 4);
      }
    }
    ctx.restore();
    ctx.fillStyle = "#222"; ctx.font = "11px sans-serif";
    for (r = 0; r < rows.length; r++) { ctx.fillText(data.rows[r], 4, plotTop + r * ROW_H + ROW_H / 2); }
    root.dataset.viewStart = String(view.t0);
    root.dataset.viewEnd = String(view.t1);
    label.textContent = "showing " + fmt(view.t0) + " to " + fmt(view.t1) + " (" + fmt(view.t1 - view.t0) +
      ") of the detailed window " + fmt(win[0]) + " to " + fmt(win[1]) + " (" + data.window_source + ")";
    drawOverview();
  }
  function drawOverview() {
    var c = fit(over), ctx = c.ctx, w = c.w, h = c.h, busy = data.overview.busy_pct, span = data.span[1] || 1;
    ctx.clearRect(0, 0, w, h);
    function ox(t) { return LABEL_W + t / span * (w - LABEL_W); }
    ctx.fillStyle = "#dfe7f3"; ctx.fillRect(ox(win[0]), 0, Math.max(1, ox(win[1]) - ox(win[0])), h);
    ctx.fillStyle = "#4c72b0";
    for (var b = 0; b < busy.length; b++) {
      var x0 = ox(data.overview.start + b * data.overview.bin_ns), x1 = ox(data.overview.start + (b + 1) * data.overview.bin_ns);
      var bh = busy[b] > 0 ? Math.max(1, busy[b] / 100 * (h - 4)) : 0;  // any work shows
      ctx.fillRect(x0, h - bh, Math.max(1, x1 - x0), bh);
    }
    ctx.strokeStyle = "#c44e52"; ctx.lineWidth = 2;
    ctx.strokeRect(ox(view.t0), 1, Math.max(2, ox(view.t1) - ox(view.t0)), h - 2);
    ctx.lineWidth = 1; ctx.fillStyle = "#222"; ctx.font = "11px sans-serif"; ctx.textBaseline = "middle";
    ctx.fillText("whole capture, GPU busy %", 4, h / 2);
  }
  function setView(t0, t1) {
    var span = Math.max(MIN_SPAN, Math.min(t1 - t0, (win[1] - win[0]) * 1.02));
    var lo = win[0] - (win[1] - win[0]) * 0.01, hi = win[1] + (win[1] - win[0]) * 0.01;
    t0 = Math.max(lo, Math.min(t0, hi - span));
    view.t0 = t0; view.t1 = t0 + span;
    draw();
  }
  function zoom(factor, atX) {
    var w = main.clientWidth, t = tOf(Math.max(LABEL_W, atX), w);
    setView(t - (t - view.t0) * factor, t + (view.t1 - t) * factor);
  }
  function hit(x, y) {
    var w = main.clientWidth, r = Math.floor((y - plotTop) / ROW_H);
    if (x < LABEL_W || r < 0 || r >= rows.length) { return -1; }
    var t = tOf(x, w), slack = 2 * (view.t1 - view.t0) / (w - LABEL_W), ops = rows[r].ops, best = -1;
    for (var k = firstEnding(ops, t - slack, rows[r].longest); k < ops.length && start[ops[k]] <= t + slack; k++) {
      var o = ops[k];
      if (start[o] - slack <= t && t <= start[o] + dur[o] + slack) {
        if (best < 0 || Math.abs(start[o] + dur[o] / 2 - t) < Math.abs(start[best] + dur[best] / 2 - t)) { best = o; }
      }
    }
    return best;
  }
  function showTip(o, ev) {
    var step = stepAt(start[o] + dur[o] / 2);
    var lines = [data.names[data.name[o]], data.kinds[data.kind[o]] + ", " + fmt(dur[o]) + " at " + fmt(start[o]),
                 data.rows[row[o]], step ? "step " + step[2] + (step[3] ? " (" + step[3] + ")" : "") : "outside any step"];
    tip.textContent = "";
    lines.forEach(function (text, k) {
      var line = document.createElement(k === 0 ? "strong" : "div");
      line.textContent = text;  // text, never HTML: names come from the trace
      tip.appendChild(line);
    });
    var box = root.getBoundingClientRect();
    tip.style.left = Math.min(ev.clientX - box.left + 12, box.width - 320) + "px";
    tip.style.top = (ev.clientY - box.top + 14) + "px";
    tip.hidden = false;
  }
  var drag = null;
  main.addEventListener("wheel", function (ev) {
    ev.preventDefault();
    zoom(Math.exp(ev.deltaY * 0.002), ev.clientX - main.getBoundingClientRect().left);
  }, { passive: false });
  main.addEventListener("mousedown", function (ev) { drag = { x: ev.clientX, t0: view.t0, t1: view.t1 }; });
  window.addEventListener("mouseup", function () { drag = null; });
  // the drag follows the mouse beyond the canvas until the button is released
  window.addEventListener("mousemove", function (ev) {
    if (!drag) { return; }
    var dt = (ev.clientX - drag.x) / (main.clientWidth - LABEL_W) * (drag.t1 - drag.t0);
    setView(drag.t0 - dt, drag.t1 - dt);
    tip.hidden = true;
  });
  main.addEventListener("mousemove", function (ev) {
    if (drag) { return; }
    var box = main.getBoundingClientRect(), o = hit(ev.clientX - box.left, ev.clientY - box.top);
    if (o < 0) { tip.hidden = true; } else { showTip(o, ev); }
  });
  main.addEventListener("mouseleave", function () { tip.hidden = true; });
  main.addEventListener("dblclick", function () { setView(win[0], win[1]); });
  function overviewTo(ev) {
    var box = over.getBoundingClientRect(), span = data.span[1] || 1;
    var t = (ev.clientX - box.left - LABEL_W) / (box.width - LABEL_W) * span, half = (view.t1 - view.t0) / 2;
    setView(t - half, t + half);
  }
  var overDrag = false;
  over.addEventListener("mousedown", function (ev) { overDrag = true; overviewTo(ev); });
  over.addEventListener("mousemove", function (ev) { if (overDrag) { overviewTo(ev); } });
  window.addEventListener("mouseup", function () { overDrag = false; });
  root.querySelectorAll("button[data-zoom]").forEach(function (button) {
    button.addEventListener("click", function () {
      var how = button.dataset.zoom;
      if (how === "reset") { setView(win[0], win[1]); } else { zoom(how === "in" ? 0.5 : 2, (LABEL_W + main.clientWidth) / 2); }
    });
  });
  window.addEventListener("resize", draw);
  root.hidden = false;
  draw();
})();
