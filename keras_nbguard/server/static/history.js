// Draws each notebook's across-runs plots (fit time, RSS, GPU per run) from the figure data the
// page embeds: figures.figure_data, the numbers the in-notebook dashboard plots. x is each label's
// run number. A null y is an unknown figure or a kernel restart: a gap in the line, never 0.
(() => {
  "use strict";
  const AXES = {fit: ["x", "y"], rss: ["x2", "y2"], gpu: ["x3", "y3"]};
  const TITLES = {
    fit: "fit time per run [s]",
    rss: "RSS per run [MiB]: after ─ peak ··· before - -",
    gpu: "GPU memory per run [MiB]: TF peak ─ NVML process ··· device - -",
  };
  const axis = (name) => name[0] + "axis" + name.slice(1);  // "x2" -> "xaxis2"

  function layoutFor(data, panels) {
    const n = panels.length;
    const step = Math.max(1, Math.ceil(data.max_run / 10));  // whole run numbers, ~10 ticks
    const layout = {
      height: 220 * n + 70, margin: {l: 60, r: 20, t: 20, b: 45}, hovermode: "closest",
      legend: {title: {text: "label"}}, annotations: [], shapes: [],
      paper_bgcolor: "#fff", plot_bgcolor: "#fafafa",
    };
    panels.forEach((panel, i) => {
      const [xa, ya] = AXES[panel];
      const top = 1 - i / n, bottom = 1 - (i + 1) / n;
      layout[axis(xa)] = {anchor: ya, domain: [0, 1], tick0: 1, dtick: step,
                          matches: i ? "x" : undefined,
                          title: i === n - 1 ? {text: "run (of its label)"} : undefined};
      // fitted to the data: from 0, an 8 MiB-a-run rise on 600 MiB would look flat
      layout[axis(ya)] = {anchor: xa, domain: [bottom + 0.04, top - 0.07]};
      layout.annotations.push({text: "<b>" + TITLES[panel] + "</b>", showarrow: false,
                               xref: "paper", yref: "paper", x: 0, xanchor: "left",
                               y: top - 0.065, yanchor: "bottom", font: {size: 12}});
      for (const mark of data.restarts) {  // a kernel restarted between a label's runs
        layout.shapes.push({type: "line", xref: xa, yref: ya + " domain", x0: mark.x,
                            x1: mark.x, y0: 0, y1: 1,
                            line: {dash: "dot", color: mark.color, width: 1.5}});
        layout.annotations.push({text: "restart", showarrow: false, xref: xa, x: mark.x,
                                 yref: ya + " domain", y: 1, yanchor: "bottom",
                                 font: {size: 9, color: mark.color}});
      }
    });
    return layout;
  }

  function tracesFor(data) {
    return data.traces.map((t) => ({
      type: "scatter", meta: t.uid, name: t.name, legendgroup: t.label,
      showlegend: t.showlegend, mode: t.symbol ? "markers" : "lines+markers",
      xaxis: AXES[t.panel][0], yaxis: AXES[t.panel][1], x: t.x, y: t.y, connectgaps: false,
      text: t.text || undefined,
      line: {color: t.color, dash: t.dash, width: 1.5},
      marker: t.symbol ? {symbol: t.symbol, size: 12, color: t.color} : {size: 6},
      hovertemplate: t.text ? "%{text}<extra></extra>" : "%{fullData.name}: %{y:.1f}<extra></extra>",
    }));
  }

  for (const section of document.querySelectorAll(".nbguard-notebook")) {
    const target = section.querySelector(".nbguard-plot");
    const source = section.querySelector("script.nbguard-data");
    if (!target || !source) continue;
    if (typeof Plotly === "undefined") {
      target.textContent = "plots unavailable: plotly.js did not load";
      continue;
    }
    const data = JSON.parse(source.textContent);
    const panels = ["fit", "rss"].concat(data.traces.some((t) => t.panel === "gpu") ? ["gpu"] : []);
    Plotly.newPlot(target, tracesFor(data), layoutFor(data, panels),
                   {displaylogo: false, responsive: true});
  }
})();
