// The dashboard's interactive figure (an anywidget ESM): plotly.js draws it from plain rows, one per
// run, that the kernel sends as they come ({type: "rows", start, rows}) and the RSS series of the
// run going on ({type: "live", start, t, y, epochs, title}). plotly.js itself is loaded once per
// page: from the Jupyter server extension's /keras-nbguard/static/plotly.min.js when it is there,
// else asked of the kernel once ({type: "plotly"}: the same file, from plotly's package data).
// A null y is an unknown figure: a gap, never 0. A kernel restart breaks each label's line.

const SERIES = {  // panel: [[row key, name, dash], ...]; the first is the main series
  fit: [["fit", "fit", "solid"]],
  rss: [["after", "after", "solid"], ["peak", "peak", "dot"], ["before", "before", "dash"]],
  gpu: [["tf", "TF peak", "solid"], ["proc", "NVML process", "dot"], ["dev", "NVML device", "dash"]],
};
const TITLES = {
  fit: "fit time per run [s]", rss: "RSS per run [MiB]: after ─ peak ··· before - -",
  gpu: "GPU memory per run [MiB]", epochs: "seconds per epoch (current run)",
  live: "RSS over time (current run) [MiB]",
};
const XTITLES = {fit: "run (of its label)", rss: "run (of its label)", gpu: "run (of its label)",
                 epochs: "epoch", live: "seconds into the run"};
const SYMBOLS = {error: "x", oom: "star", interrupted: "diamond", died: "x"};

function loadPlotly(model) {
  if (window.Plotly) return Promise.resolve(window.Plotly);
  if (window.__nbguardPlotly) return window.__nbguardPlotly;
  // a <script> tag, not eval: the browser streams and compiles the 4.8 MB lazily (eval of it took
  // 9 s on 2 loaded CPUs); an AMD loader on the page (requirejs) would take the UMD bundle for
  // itself, so it is put aside meanwhile
  const script = (src) => new Promise((resolve, reject) => {
    const tag = document.createElement("script");
    const amd = window.define;
    window.define = undefined;
    const done = () => { window.define = amd; tag.remove(); };
    tag.onload = () => {
      done();
      window.Plotly ? resolve(window.Plotly) : reject(new Error("plotly.js did not load"));
    };
    tag.onerror = () => { done(); reject(new Error("could not load " + src)); };
    tag.src = src;
    document.head.appendChild(tag);
  });
  const fromKernel = () => new Promise((resolve, reject) => {
    const onMsg = (msg, buffers) => {
      if (!msg || msg.type !== "plotly") return;
      model.off("msg:custom", onMsg);
      if (!buffers || !buffers.length) { reject(new Error("the kernel found no plotly.js")); return; }
      const url = URL.createObjectURL(new Blob([buffers[0]], {type: "text/javascript"}));
      script(url).then(resolve, reject).finally(() => URL.revokeObjectURL(url));
    };
    model.on("msg:custom", onMsg);
    model.send({type: "plotly"});
  });
  const fromServer = () => {
    const config = JSON.parse(document.getElementById("jupyter-config-data")?.textContent || "{}");
    if (config.baseUrl === undefined) return Promise.reject(new Error("no Jupyter server page"));
    // served with the page's cookie; the server extension answers only to a logged-in page
    return script(config.baseUrl + "keras-nbguard/static/plotly.min.js?v=" + model.get("plotly_v"));
  };
  window.__nbguardPlotly = fromServer().catch(fromKernel);
  window.__nbguardPlotly.catch(() => { window.__nbguardPlotly = undefined; });
  return window.__nbguardPlotly;
}

function panelsFor(width) {
  // [panel, x0, x1, slot]: two columns when there is room, else one under the other
  if (width >= 760) {
    return {slots: 3, panels: [["fit", 0, 0.46, 0], ["rss", 0.54, 1, 0], ["gpu", 0, 0.46, 1],
                               ["epochs", 0.54, 1, 1], ["live", 0, 1, 2]]};
  }
  return {slots: 5, panels: ["fit", "rss", "gpu", "epochs", "live"].map((p, i) => [p, 0, 1, i])};
}

function figure(state, width) {
  const rows = state.rows, live = state.live, gpuNote = state.notes.gpu;
  const gpu = rows.some((r) => r.tf !== null || r.proc !== null || r.dev !== null);
  const {panels, slots} = panelsFor(width);
  const slotHeight = slots > 3 ? 210 : 250, legend = 56;
  const height = slots * slotHeight + legend;
  const layout = {
    height, autosize: true, margin: {l: 52, r: 16, t: 28, b: legend}, hovermode: "closest",
    template: undefined, paper_bgcolor: "#fff", plot_bgcolor: "#fafafa", showlegend: true,
    legend: {orientation: "h", yanchor: "top", y: 0, x: 0,  // in the bottom margin
             title: {text: "label"}},
    annotations: [], shapes: [], font: {size: 11},
  };
  const axes = {};
  const narrow = width < 560;
  panels.forEach(([panel, x0, x1, slot], i) => {
    const n = i + 1, xa = "x" + (n > 1 ? n : ""), ya = "y" + (n > 1 ? n : "");
    axes[panel] = [xa, ya];
    const top = 1 - slot / slots, bottom = 1 - (slot + 1) / slots;
    const title = narrow ? TITLES[panel].replace(": ", ":<br>") : TITLES[panel];
    layout["xaxis" + (n > 1 ? n : "")] = {
      anchor: ya, domain: [x0, x1], rangemode: "nonnegative", automargin: true,
      title: {text: XTITLES[panel], font: {size: 10}, standoff: 2}, zeroline: false,
    };
    const s = 1 / slots;  // a slot: its title on top, the x axis' title at the bottom
    layout["yaxis" + (n > 1 ? n : "")] = {
      anchor: xa, domain: [bottom + 0.24 * s, top - (narrow ? 0.2 : 0.13) * s],
      rangemode: "nonnegative", automargin: true, zeroline: false,
    };
    layout.annotations.push({text: "<b>" + title + "</b>", showarrow: false, xref: "paper",
                             yref: "paper", x: x0, xanchor: "left", y: top,
                             yanchor: "top", align: "left", font: {size: 12}});
  });
  const traces = [];
  const empty = (panel, text) => {  // an empty panel says why, with no axes 0–4
    const [xa, ya] = axes[panel];
    const xk = "xaxis" + xa.slice(1), yk = "yaxis" + ya.slice(1);
    layout[xk].visible = false;
    layout[yk].visible = false;
    layout.annotations.push({text, showarrow: false, xref: xa + " domain", yref: ya + " domain",
                             x: 0.5, y: 0.5, font: {color: "#777", size: 12}, name: "empty"});
  };
  // runs: one line per label (its colour), x its run number, broken where a kernel restarted
  const groups = [];
  const byGroup = new Map();
  for (const r of rows) {
    if (!byGroup.has(r.g)) { byGroup.set(r.g, []); groups.push(r.g); }
    byGroup.get(r.g).push(r);
  }
  let maxRun = 1;
  for (const [panel, series] of Object.entries(SERIES)) {
    if (!axes[panel]) continue;
    const [xa, ya] = axes[panel];
    for (const [key, name, dash] of series) {
      for (const g of groups) {
        const runs = byGroup.get(g), x = [], y = [], text = [];
        runs.forEach((r, i) => {
          if (i && r.k !== runs[i - 1].k) { x.push((r.n + runs[i - 1].n) / 2); y.push(null); text.push(""); }
          maxRun = Math.max(maxRun, r.n);
          if (key === "fit" && r.cut) return;  // a part of a fit: its red mark, not the line
          x.push(r.n); y.push(r[key]); text.push(r.text);
        });
        const main = key === series[0][0];
        traces.push({
          type: "scatter", meta: panel + ":" + name.toLowerCase() + ":" + g, name: main ? g : g + " " + name,
          legendgroup: g, showlegend: panel === "fit", mode: "lines+markers", xaxis: xa, yaxis: ya,
          x, y, text: main ? text : undefined, connectgaps: false,
          cliponaxis: false,  // the last run's mark sat half cut at the panel's right edge
          // the others' marks open and larger: a peak equal to the RSS after (the usual run)
          // sat hidden under the main series' mark
          line: {color: runs[0].c, dash, width: 1.5},
          marker: main ? {size: 6} : {size: 8, symbol: dash === "dot" ? "circle-open" : "square-open"},
          hovertemplate: main ? "%{text}<extra></extra>" : "%{fullData.name}: %{y:.1f}<extra></extra>",
        });
      }
    }
    // failed runs: big marks over the panel's main series, whatever the label's colour
    const bad = rows.filter((r) => r.s !== "ok" && r[series[0][0]] !== null);
    traces.push({
      // no legend entry: it showed the first bad run's mark ("◆ failed or stopped" beside a
      // key reading "◆ interrupted"), and the key above says what each mark is
      type: "scatter", meta: panel + ":not ok", name: "failed or stopped", showlegend: false,
      cliponaxis: false,
      mode: "markers", xaxis: xa, yaxis: ya, x: bad.map((r) => r.n), y: bad.map((r) => r[series[0][0]]),
      text: bad.map((r) => r.text), hovertemplate: "%{text}<extra></extra>",
      marker: {size: 13, color: "#d62728", symbol: bad.map((r) => SYMBOLS[r.s] || "x")},
    });
    // a kernel restart: a dotted line in the label's colour between its runs on either side
    for (const g of groups) {
      const runs = byGroup.get(g);
      runs.forEach((r, i) => {
        if (!i || r.k === runs[i - 1].k) return;
        const x = (r.n + runs[i - 1].n) / 2;
        layout.shapes.push({type: "line", xref: xa, yref: ya + " domain", x0: x, x1: x, y0: 0,
                            y1: 1, line: {dash: "dot", color: r.c, width: 1.5}});
        layout.annotations.push({text: "restart", showarrow: false, xref: xa, x, yref: ya + " domain",
                                 y: 1, yanchor: "bottom", font: {size: 9, color: r.c}});
      });
    }
    if (!rows.length) empty(panel, "no run yet");
    else if (panel !== "gpu" && !rows.some((r) => r[series[0][0]] !== null)) {
      empty(panel, panel === "fit" ? "no fit in these runs (no model.fit)" : "no reading");
    }
  }
  for (const panel of ["fit", "rss", "gpu"]) {
    if (!axes[panel]) continue;
    const k = "xaxis" + axes[panel][0].slice(1);
    Object.assign(layout[k], {tick0: 1, dtick: Math.max(1, Math.ceil(maxRun / 10))});
  }
  if (axes.gpu && !gpu && rows.length) empty("gpu", gpuNote || "no GPU reading");
  const [ex, ey] = axes.epochs, [lx, ly] = axes.live;
  const severalFits = fitsIn(live) > 1;
  traces.push({type: "bar", meta: "live:epochs", name: "epoch", showlegend: false, xaxis: ex, yaxis: ey,
               x: epochX(live), y: live.epochs, marker: {color: "#607d8b"},
               hovertemplate: (severalFits ? "%{x}" : "epoch %{x}") + ": %{y:.3f} s<extra></extra>"});
  traces.push({type: "scatter", meta: "live:rss", name: "RSS", showlegend: false, mode: "lines",
               xaxis: lx, yaxis: ly, x: live.t, y: live.y, line: {color: "#607d8b"},
               hovertemplate: "%{x:.2f} s: %{y:.1f} MiB<extra></extra>"});
  Object.assign(layout["xaxis" + ex.slice(1)], {tick0: 1, dtick: Math.max(1, Math.ceil(live.epochs.length / 10))});
  if (severalFits) layout["xaxis" + ex.slice(1)].title.text = "fit · epoch";
  if (!live.epochs.length) empty("epochs", live.t.length ? "no epoch in this run" : "no run yet");
  if (!live.t.length) empty("live", "no run yet");
  return {traces, layout};
}

// How many fits the run's epochs come from: a cell of several (k folds, cross-validation, a
// search) labels each bar with its fit, "fit 2 · 1", not as one fit's epochs 1..n.
function fitsIn(live) {
  const fits = live.fits || [];
  return fits.length ? fits[fits.length - 1] : 1;
}

function epochX(live) {
  if (fitsIn(live) <= 1) return live.epochs.map((_, i) => i + 1);
  const fits = live.fits, seen = {};
  return live.epochs.map((_, i) => {
    const fit = fits[Math.min(i, fits.length - 1)];
    seen[fit] = (seen[fit] || 0) + 1;
    return `fit ${fit} · ${seen[fit]}`;
  });
}

function initialize({model}) {
  // the kernel's messages, kept on the model (set, never saved: the kernel has them already)
  model.on("msg:custom", (msg) => {
    if (!msg) return;
    if (msg.type === "rows") {
      const rows = model.get("rows") || [];
      if (msg.start > rows.length) { model.send({type: "resync"}); return; }  // a message was lost
      model.set("rows", rows.slice(0, msg.start).concat(msg.rows));
    } else if (msg.type === "live") {
      const live = model.get("live") || {t: [], y: [], epochs: [], title: ""};
      if (msg.start > live.t.length) { model.send({type: "resync"}); return; }
      model.set("live", {t: live.t.slice(0, msg.start).concat(msg.t),
                         y: live.y.slice(0, msg.start).concat(msg.y),
                         epochs: msg.epochs, fits: msg.fits || [], title: msg.title});
    }
  });
}

function render({model, el}) {
  const box = document.createElement("div");
  box.className = "nbguard-figure";
  box.style.width = "100%";
  box.textContent = "loading plotly.js …";
  box.style.color = "#777";
  el.appendChild(box);
  // deferred: a draw asked for while the box had no size (out of view in a windowed notebook)
  let Plotly = null, pending = null, lastWidth = 0, drawn = null, deferred = false;
  const liveShape = (live) => [live.epochs.length > 0, live.t.length > 0,
                               Math.max(1, Math.ceil(live.epochs.length / 10)), fitsIn(live) > 1];
  // a whole redraw for a new run (rows) or width; while a run goes, the live samples a few
  // times a second: only the two live traces change (restyle), so a busy page keeps up
  const draw = (what) => {
    if (!Plotly) return;
    pending = pending === "all" || what !== "live" ? "all" : "live";
    if (draw.queued) return;
    draw.queued = true;
    requestAnimationFrame(() => {
      draw.queued = false;
      const kind = pending;
      pending = null;
      const live = model.get("live") || {t: [], y: [], epochs: []};
      const shape = liveShape(live);
      if (kind === "live" && drawn && String(shape) === String(drawn.shape)) {
        Plotly.restyle(box, {x: [epochX(live), live.t],
                             y: [live.epochs, live.y]}, drawn.liveIndices);
        return;
      }
      const width = box.clientWidth || el.clientWidth;
      if (!width && box.isConnected) {  // not laid out: drawn at 0 px, it stayed 0 px high,
        deferred = true;                // its charts under the lists; the observer draws it
        return;
      }
      deferred = false;
      lastWidth = width || 700;
      const state = {rows: model.get("rows") || [], live, notes: model.get("notes") || {}};
      const {traces, layout} = figure(state, lastWidth);
      // its height in the page, not only in the figure: Plotly's own resize reads the box's
      // (a window narrowed while the dashboard was out of view left it 0 px high)
      box.style.height = layout.height + "px";
      Plotly.react(box, traces, layout, {displaylogo: false, responsive: true});
      drawn = {shape, liveIndices: [traces.length - 2, traces.length - 1]};
    });
  };
  const drawAll = () => draw("all");
  const drawLive = () => draw("live");
  loadPlotly(model).then((P) => {
    Plotly = P;
    box.textContent = "";
    box.style.color = "";
    draw("all");
  }, (err) => { box.textContent = "the interactive figure could not load: " + err; });
  model.on("change:rows", drawAll);
  model.on("change:live", drawLive);
  model.on("change:notes", drawAll);
  // the layout changes at 560 and 760 px (one column, titles wrapped): redraw when crossed
  const resize = new ResizeObserver(() => {
    const width = box.clientWidth;
    const crossed = (width < 760) !== (lastWidth < 760) || (width < 560) !== (lastWidth < 560);
    if (Plotly && width && (deferred || crossed)) draw("all");
  });
  resize.observe(box);
  return () => {
    resize.disconnect();
    model.off("change:rows", drawAll);
    model.off("change:live", drawLive);
    model.off("change:notes", drawAll);
    if (Plotly) Plotly.purge(box);
  };
}

export default {initialize, render};
