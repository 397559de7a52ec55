// The Traffic card of an endpoint page (docs/serving.md "Traffic metrics"), drawn with uPlot (static/vendor, as
// the GPU telemetry charts). The page embeds the series the API's traffic/ answers (inference.traffic.series,
// one function for both); while the endpoint lives the same answer is fetched again every data-poll seconds.
// With two revisions or more, requests, errors and p95 latency are drawn per revision (the canary beside the
// stable one); else the endpoint's own lines. A file, not an inline script: the Content-Security-Policy allows none.
(function () {
  "use strict";

  var COLOURS = ["#1f5fbf", "#b5561a", "#1b7f3b", "#6b3fa0", "#9b1c1c", "#0e7490"];
  var DASHES = [[], [6, 3], [2, 2], [8, 2, 2, 2], [1, 3], [10, 4]];

  function percent(values) {
    return values.map(function (v) { return v === null ? null : Math.round(v * 1000) / 10; });
  }

  // Each chart: its lines, as [label, values] pairs, from one answer.
  var CHARTS = [
    {id: "rps", unit: "req/s", lines: function (a) { return perRevision(a, "requests_per_second", function (v) { return v; }); }},
    {id: "errors", unit: "%", lines: function (a) { return perRevision(a, "error_rate", percent); }},
    {id: "latency", unit: "ms", lines: function (a) {
      if (a.revisions.length > 1) { return perRevision(a, "latency_p95_ms", function (v) { return v; }, " p95"); }
      return [["p50", a.total.latency_p50_ms], ["p95", a.total.latency_p95_ms], ["p99", a.total.latency_p99_ms]];
    }},
    {id: "ttft", unit: "ms", lines: function (a) {
      return [["p50", a.total.ttft_p50_ms], ["p95", a.total.ttft_p95_ms]];
    }},
  ];

  function perRevision(answer, name, convert, suffix) {
    if (answer.revisions.length > 1) {
      return answer.revisions.map(function (r) { return ["revision " + r.revision + (suffix || ""), convert(r[name])]; });
    }
    return [["all requests", convert(answer.total[name])]];
  }

  function build(answer, chart) {
    var lines = chart.lines(answer);
    var series = [{}].concat(lines.map(function (line, i) {
      return {
        label: line[0], stroke: COLOURS[i % COLOURS.length], dash: DASHES[i % DASHES.length], width: 1.5,
        spanGaps: false, value: function (u, v) { return v == null ? "–" : v + " " + chart.unit; },
      };
    }));
    return {data: [answer.t].concat(lines.map(function (line) { return line[1]; })), series: series};
  }

  function draw(root, answer) {
    CHARTS.forEach(function (chart) {
      var box = root.querySelector("[data-chart='" + chart.id + "']");
      if (!box) { return; }
      var built = build(answer, chart);
      if (box.plot && box.plot.series.length === built.series.length) {
        box.plot.setData(built.data);
        return;
      }
      if (box.plot) { box.plot.destroy(); }
      box.textContent = "";
      box.plot = new uPlot({
        width: Math.max(box.clientWidth, 260), height: 180, series: built.series,
        scales: {x: {time: true}, y: {range: function (u, min, max) { return [0, Math.max(max || 0, 1)]; }}},
        axes: [{}, {label: chart.unit, size: 55}],
        cursor: {drag: {x: false, y: false}},
      }, built.data, box);
      window.Slipway.scrollable(box.querySelector("table.u-legend"));
    });
  }

  function start(root) {
    var source = document.getElementById(root.dataset.source);
    if (!source || typeof uPlot === "undefined") { return; }
    draw(root, JSON.parse(source.textContent));
    var every = parseInt(root.dataset.poll || "0", 10);
    if (every > 0 && root.dataset.url) {
      window.setInterval(function () {
        fetch(root.dataset.url, {credentials: "same-origin", headers: {Accept: "application/json"}})
          .then(function (response) { return response.ok ? response.json() : null; })
          .then(function (fresh) { if (fresh) { draw(root, fresh); } })
          .catch(function () { /* the next poll tries again */ });
      }, every * 1000);
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-traffic]").forEach(start);
  });
})();
