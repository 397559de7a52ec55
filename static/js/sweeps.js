// The sweep page's charts (docs/sweeps.md "The sweep page"), drawn with uPlot (static/vendor, as the GPU telemetry
// charts) from the data the page embeds (sweeps.charts.sweep_charts, a json_script): the best value so far over time
// and over the GPU-hours spent (step lines), the objective against each parameter (a scatter each: a log axis for a
// log-scaled parameter, the choices on an index axis for a categorical one) and the trials' learning curves
// overlaid, pruned ones dimmed. While the sweep is live the page's header polls (htmx) and its answer brings the
// data again out of band: the charts are drawn again from it, and the trials ticked for Compare stay ticked.
// A file, not an inline script: the Content-Security-Policy allows none.
(function () {
  "use strict";

  var COLOURS = ["#1f5fbf", "#b5561a", "#1b7f3b", "#6b3fa0", "#9b1c1c", "#0e7490", "#444444", "#c98a2b"];
  // A trial's state as a colour (pruned dimmed); the same words as the trials table's badges.
  var STATES = {
    completed: "#1b7f3b", pruned: "rgba(181, 86, 26, 0.45)", active: "#1f5fbf", stopped: "#6b7280", failed: "#9b1c1c",
  };
  var HEIGHT = 200;
  var ticked = {};  // the work ids ticked for Compare, kept across the table's refreshes
  var drawnText = null;  // the data last drawn

  function number(v) {
    if (v == null) { return "–"; }
    var size = Math.abs(v);
    return size !== 0 && (size < 1e-3 || size >= 1e5) ? v.toExponential(3) : String(Math.round(v * 1e4) / 1e4);
  }

  // Draw into box: again with setData when the chart's shape (its key) is the same, else anew.
  function draw(box, key, options, data) {
    if (box.plot && box.plotKey === key) {
      box.plot.setData(data);
      return;
    }
    if (box.plot) { box.plot.destroy(); box.plot = null; }
    box.textContent = "";
    options.width = Math.max(box.clientWidth, 260);
    options.height = HEIGHT;
    options.cursor = {drag: {x: false, y: false}};
    box.plot = new uPlot(options, data, box);
    box.plotKey = key;
    window.Slipway.scrollable(box.querySelector("table.u-legend"));
  }

  function empty(box) {
    if (box.plot) { box.plot.destroy(); box.plot = null; box.plotKey = null; }
    if (box.dataset.shown !== "empty") {
      box.textContent = "";
      var note = document.createElement("p");
      note.className = "empty";
      note.textContent = box.dataset.empty || "Nothing to draw yet.";
      box.appendChild(note);
    }
    box.dataset.shown = "empty";
  }

  function bestChart(box, line, answer, time) {
    if (!box) { return; }
    if (!line.y.some(function (v) { return v != null; })) { empty(box); return; }
    box.dataset.shown = "chart";
    draw(box, "best", {
      series: [
        time ? {} : {label: "GPU-hours", value: function (u, v) { return v == null ? "–" : v.toFixed(2) + " GPU-h"; }},
        {label: "best " + answer.metric, stroke: COLOURS[0], width: 2, spanGaps: true,
         paths: uPlot.paths.stepped({align: 1}), points: {show: true, size: 5},
         value: function (u, v) { return number(v); }},
      ],
      scales: {x: {time: time}},
      axes: [time ? {} : {label: "GPU-hours"}, {label: answer.metric, size: 60, values: function (u, vs) { return vs.map(number); }}],
    }, [line.x, line.y]);
  }

  function parameterChart(box, chart, answer) {
    if (!chart || !chart.x.length) { empty(box); return; }
    box.dataset.shown = "chart";
    var labels = chart.labels;
    var x = {time: false};
    var axis = {label: chart.name};
    if (chart.scale === "log") {
      x.distr = 3;
      x.log = 10;
    } else if (chart.scale === "categorical") {
      x.range = function () { return [-0.5, labels.length - 0.5]; };
      axis.splits = function () { return labels.map(function (label, i) { return i; }); };
      axis.values = function (u, splits) { return splits.map(function (i) { return labels[i] === undefined ? "" : labels[i]; }); };
    }
    var series = [{
      label: chart.name,
      value: function (u, v, s, i) {
        if (i == null) { return "–"; }
        var shown = labels ? labels[v] : number(v);
        return "trial " + chart.trials[i] + ": " + shown;
      },
    }].concat(chart.series.map(function (s) {
      var colour = STATES[s.state] || COLOURS[0];
      return {label: s.label, stroke: colour, fill: colour, paths: function () { return null; },
              points: {show: true, size: 8, stroke: colour, fill: colour}, value: function (u, v) { return number(v); }};
    }));
    var key = chart.scale + ":" + chart.series.map(function (s) { return s.state; }).join(",");
    draw(box, key, {series: series, scales: {x: x}, axes: [axis, {label: answer.metric, size: 60, values: function (u, vs) { return vs.map(number); }}]},
         [chart.x].concat(chart.series.map(function (s) { return s.y; })));
  }

  function curvesChart(box, answer) {
    if (!box) { return; }
    var curves = answer.curves;
    if (!curves.length) { empty(box); return; }
    box.dataset.shown = "chart";
    var data = uPlot.join(curves.map(function (c) { return [c.steps, c.values]; }));
    var series = [{label: "step"}].concat(curves.map(function (c, i) {
      var pruned = c.state === "pruned";
      return {label: c.label, stroke: pruned ? STATES.pruned : COLOURS[i % COLOURS.length],
              width: c.best ? 3 : (pruned ? 1 : 1.5), spanGaps: true, points: {show: false},
              value: function (u, v) { return number(v); }};
    }));
    var key = "curves:" + curves.map(function (c) { return c.number + c.state + c.best; }).join(",");
    draw(box, key, {series: series, scales: {x: {time: false}}, legend: {show: false},
                    axes: [{label: "step"}, {label: answer.metric, size: 60, values: function (u, vs) { return vs.map(number); }}]}, data);
  }

  function render(root) {
    var source = document.getElementById(root.dataset.source);
    if (!source || typeof uPlot === "undefined") { return; }
    if (source.textContent === drawnText) { return; }
    drawnText = source.textContent;
    var answer = JSON.parse(drawnText);
    bestChart(root.querySelector("[data-chart='best-time']"), answer.best.time, answer, true);
    bestChart(root.querySelector("[data-chart='best-gpu-hours']"), answer.best.gpu_hours, answer, false);
    root.querySelectorAll("[data-chart='parameter']").forEach(function (box) {
      var chart = answer.parameters.filter(function (p) { return p.name === box.dataset.parameter; })[0];
      parameterChart(box, chart, answer);
    });
    curvesChart(root.querySelector("[data-chart='curves']"), answer);
  }

  function keepTicks() {
    document.querySelectorAll("[data-compare-pick]").forEach(function (box) {
      box.checked = !!ticked[box.value];
    });
  }

  document.addEventListener("change", function (event) {
    var box = event.target;
    if (box && box.matches && box.matches("[data-compare-pick]")) {
      if (box.checked) { ticked[box.value] = true; } else { delete ticked[box.value]; }
    }
  });

  function all() {
    document.querySelectorAll("[data-sweep-charts]").forEach(render);
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-compare-pick]").forEach(function (box) {
      if (box.checked) { ticked[box.value] = true; }  // a browser's restored form state
    });
    all();
  });
  document.addEventListener("htmx:afterSettle", function () {
    keepTicks();
    all();
  });
})();
