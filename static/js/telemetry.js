// GPU telemetry charts of a run or an endpoint page (docs/metrics.md "GPU telemetry"), drawn with uPlot
// (static/vendor, fetched from the npm registry by `make install`). The page embeds the series the API's
// telemetry/ answers (workloads.telemetry.series.series, one function for both), already downsampled by
// LTTB to about the chart's width; while the workload runs, the same answer is fetched again every
// data-poll seconds. A file, not an inline script: the Content-Security-Policy allows none.
(function () {
  "use strict";

  // Each GPU's colour, and a dash pattern too, so the lines read without colour.
  var COLOURS = ["#1f5fbf", "#b5561a", "#1b7f3b", "#6b3fa0", "#9b1c1c", "#0e7490", "#444444", "#c98a2b"];
  var DASHES = [[], [6, 3], [2, 2], [8, 2, 2, 2], [1, 3], [10, 4], [4, 2, 1, 2], [3, 5]];
  // The charts: the series drawn (dashed second ones: the memory's size), their unit and scale.
  var CHARTS = [
    {id: "util", title: "Utilization", unit: "%", series: ["util_pct"], range: [0, 100]},
    {id: "memory", title: "Memory used / total", unit: "GiB", series: ["fb_used_mib", "fb_total_mib"], scale: 1 / 1024},
    {id: "temp", title: "Temperature", unit: "°C", series: ["temp_c"]},
    {id: "power", title: "Power", unit: "W", series: ["power_w"]},
  ];

  function shortGpu(id, index) {
    return "GPU " + index + " (" + id.replace(/^GPU-/, "").slice(0, 8) + ")";
  }

  function scaled(values, factor) {
    if (!factor) { return values; }
    return values.map(function (v) { return v === null ? null : Math.round(v * factor * 10) / 10; });
  }

  // uPlot's aligned data for one chart: one line per GPU and series, on the union of their times.
  function chartData(answer, chart) {
    var tables = [], series = [{}];
    chart.series.forEach(function (name, which) {
      (answer.series[name] || []).forEach(function (line) {
        var index = answer.gpus.indexOf(line.gpu);
        tables.push([line.t, scaled(line.v, chart.scale)]);
        series.push({
          label: shortGpu(line.gpu, index) + (chart.series.length > 1 ? (which ? " total" : " used") : ""),
          stroke: COLOURS[index % COLOURS.length],
          dash: which ? [3, 3] : DASHES[index % DASHES.length],
          width: which ? 1 : 1.5,
          value: function (u, v) { return v == null ? "–" : v + " " + chart.unit; },
        });
      });
    });
    return {data: tables.length ? uPlot.join(tables) : [[]], series: series};
  }

  function options(chart, series, width) {
    return {
      width: width, height: 180, series: series,
      scales: {x: {time: true}, y: chart.range ? {range: chart.range} : {}},
      axes: [{}, {label: chart.unit, size: 55}],
      legend: {show: false},  // one legend for the four charts: legend() below
      cursor: {drag: {x: false, y: false}},
    };
  }

  // The GPUs' colours and dashes, once for all charts (a chart's own legend would repeat them four times).
  function legend(root, answer) {
    var list = root.querySelector("[data-legend]");
    if (!list || list.childElementCount === answer.gpus.length) { return; }
    list.textContent = "";
    answer.gpus.forEach(function (gpu, index) {
      var item = document.createElement("li");
      var swatch = document.createElementNS("http://www.w3.org/2000/svg", "svg");
      swatch.setAttribute("width", "28");
      swatch.setAttribute("height", "10");
      swatch.setAttribute("aria-hidden", "true");
      var line = document.createElementNS("http://www.w3.org/2000/svg", "line");
      line.setAttribute("x1", "0"); line.setAttribute("x2", "28"); line.setAttribute("y1", "5"); line.setAttribute("y2", "5");
      line.setAttribute("stroke", COLOURS[index % COLOURS.length]);
      line.setAttribute("stroke-width", "2");
      line.setAttribute("stroke-dasharray", DASHES[index % DASHES.length].join(" "));
      swatch.appendChild(line);
      item.appendChild(swatch);
      item.appendChild(document.createTextNode(shortGpu(gpu, index)));
      item.title = gpu;
      list.appendChild(item);
    });
  }

  function draw(root, answer) {
    legend(root, answer);
    CHARTS.forEach(function (chart) {
      var box = root.querySelector("[data-chart='" + chart.id + "']");
      if (!box) { return; }
      var width = Math.max(box.clientWidth, 260);
      var built = chartData(answer, chart);
      if (box.plot && box.plot.series.length === built.series.length) {
        box.plot.setData(built.data);
        return;
      }
      if (box.plot) { box.plot.destroy(); }
      box.textContent = "";
      box.plot = new uPlot(options(chart, built.series, width), built.data, box);
    });
  }

  function start(root) {
    var source = document.getElementById(root.dataset.source);
    if (!source || typeof uPlot === "undefined") { return; }
    var answer = JSON.parse(source.textContent);
    if (!answer.gpus.length) { return; }
    draw(root, answer);
    var every = parseInt(root.dataset.poll || "0", 10);
    if (every > 0 && root.dataset.url) {
      window.setInterval(function () {
        fetch(root.dataset.url, {credentials: "same-origin", headers: {Accept: "application/json"}})
          .then(function (response) { return response.ok ? response.json() : null; })
          .then(function (fresh) { if (fresh && fresh.gpus.length) { draw(root, fresh); } })
          .catch(function () { /* the next poll tries again */ });
      }, every * 1000);
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-gpu-telemetry]").forEach(start);
  });
})();
