// The tidegate dashboard: a page that polls the driver's REST API (docs/rest-api.md) and draws
// the job list, or one job's graph, throughput, backpressure, checkpoints and restarts.
// Routes (the URL fragment): #/ (jobs), #/jobs/<id>, #/jobs/<id>/checkpoints/<checkpoint id>.
// A token given as #token=... is kept for this tab and sent as a bearer token.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const state = { refreshMs: 3000, timer: null, throughput: {}, busy: false };

// --- small helpers ---------------------------------------------------------------------------
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null) continue;
    if (key === "class") node.className = value;
    else if (key === "onclick") node.addEventListener("click", value);
    else node.setAttribute(key, value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  for (const child of children.flat(Infinity)) {
    if (child !== null && child !== undefined) {
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
  }
  return node;
}

function time(ms) {
  return ms === null || ms === undefined || ms < 0 ? "-" : new Date(ms).toLocaleString();
}

function duration(ms) {
  if (ms === null || ms === undefined) return "-";
  if (ms < 10) return `${Number(ms).toFixed(1)} ms`;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${String(Math.floor(s % 60)).padStart(2, "0")}s`;
  return `${Math.floor(m / 60)}h ${String(m % 60).padStart(2, "0")}m`;
}

function bytes(n) {
  if (n === null || n === undefined) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return i === 0 ? `${n} B` : `${n.toFixed(1)} ${units[i]}`;
}

const count = (n) => (n === null || n === undefined ? "-" : Number(n).toLocaleString("en-US"));
const rate = (n) => `${count(Math.round(n))}/s`;
const percent = (r) => `${Math.round(r * 100)}%`;
const badge = (text) => el("span", { class: `badge ${text}` }, text);

function bar(ratio, level) {
  const fill = el("i");
  fill.style.width = `${Math.round(Math.min(Math.max(ratio, 0), 1) * 100)}%`;
  return el("span", { class: `bar ${level || ""}` }, fill);
}

// --- the API -----------------------------------------------------------------------------------
function token() {
  const match = /(?:^#|[&?#])token=([^&]+)/.exec(location.hash);
  if (match) {
    sessionStorage.setItem("tidegate-token", decodeURIComponent(match[1]));
    const route = location.hash.replace(/[&?#]?token=[^&]+/, "") || "#/";
    history.replaceState(null, "", route.startsWith("#") ? route : `#${route}`);
  }
  return sessionStorage.getItem("tidegate-token");
}

async function api(path, method = "GET") {
  const headers = { Accept: "application/json" };
  const bearer = token();
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  const response = await fetch(path, { method, headers });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const message = (body.errors || []).join("; ") || `HTTP ${response.status}`;
    throw new Error(response.status === 401 ? `${message} (open the dashboard with #token=...)` : message);
  }
  return body;
}

// --- routing and polling -----------------------------------------------------------------------
function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean);
  if (parts[0] === "jobs" && parts[1]) {
    return { job: parts[1], checkpoint: parts[2] === "checkpoints" ? parts[3] : null };
  }
  return {};
}

async function refresh() {
  if (state.busy) return;
  state.busy = true;
  const app = document.getElementById("app");
  try {
    const where = route();
    const view = where.job ? await jobView(where.job, where.checkpoint) : await jobsView();
    app.replaceChildren(...view);
    app.dataset.state = "ready";
    document.getElementById("refresh").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (error) {
    app.dataset.state = "error";
    app.replaceChildren(el("section", {}, el("p", { class: "error" }, `Error: ${error.message}`)));
  } finally {
    state.busy = false;
  }
}

function schedule() {
  clearInterval(state.timer);
  state.timer = setInterval(refresh, state.refreshMs);
}

async function start() {
  token();
  try {
    state.refreshMs = (await api("/config"))["refresh-interval"] || 3000;
  } catch (error) {
    // keep the default; the first refresh shows the error
  }
  window.addEventListener("hashchange", () => { refresh(); schedule(); });
  await refresh();
  schedule();
}

// --- the job list ------------------------------------------------------------------------------
async function jobsView() {
  const { jobs } = await api("/jobs");
  const rows = jobs.slice().reverse().map((job) =>
    el("tr", { class: "job clickable", "data-job-id": job.jid, onclick: () => { location.hash = `#/jobs/${job.jid}`; } },
      el("td", {}, el("a", { href: `#/jobs/${job.jid}` }, job.name)),
      el("td", { class: "mono" }, job.jid),
      el("td", {}, badge(job.state)),
      el("td", {}, time(job["start-time"])),
      el("td", { class: "num" }, duration(job.duration)),
      el("td", { class: "num" }, job.restarts),
      el("td", {}, job.runner)));
  const table = el("table", {},
    el("thead", {}, el("tr", {}, ["Name", "Job id", "Status", "Started", "Duration", "Restarts", "Runner"].map((h) => el("th", {}, h)))),
    el("tbody", {}, rows));
  return [el("section", {}, el("h1", {}, "Jobs"), jobs.length ? table : el("p", { class: "muted" }, "No jobs yet."))];
}

// --- one job -----------------------------------------------------------------------------------
async function jobView(jobId, checkpointId) {
  const base = `/jobs/${encodeURIComponent(jobId)}`;
  const [job, plan, checkpoints, exceptions] = await Promise.all([
    api(base), api(`${base}/plan`), api(`${base}/checkpoints`), api(`${base}/exceptions`),
  ]);
  let details = null;
  if (checkpointId) {
    details = await api(`${base}/checkpoints/details/${checkpointId}`).catch((e) => ({ error: e.message }));
  }
  remember(job);
  return [
    header(job, base),
    graphSection(plan.plan, job.vertices),
    throughputSection(job),
    checkpointSection(job, checkpoints, details),
    historySection(checkpoints, exceptions),
  ];
}

function header(job, base) {
  const fact = (label, value) => el("div", {}, el("span", {}, label), el("b", {}, value));
  const age = job.checkpoints["last-checkpoint-age"];
  const message = el("span", { class: "muted", id: "action-result" });
  const act = (label, method, path, cls) => el("button", {
    class: cls,
    disabled: job.state === "RUNNING" ? null : "disabled",
    onclick: async () => {
      message.textContent = `${label}…`;
      try {
        const answer = await api(path, method);
        message.textContent = answer["request-id"] ? `${label}: requested` : `${label}: done`;
      } catch (error) {
        message.textContent = `${label} failed: ${error.message}`;
      }
      refresh();
    },
  }, label);
  return el("section", { id: "job", "data-job-id": job.jid, "data-state": job.state },
    el("h1", {}, job.name, " ", badge(job.state)),
    el("div", { class: "facts" },
      fact("Job id", el("span", { class: "mono" }, job.jid)),
      fact("Started", time(job["start-time"])),
      fact("Duration", duration(job.duration)),
      fact("Runner", job.runner),
      fact("Parallelism", job.parallelism),
      fact("Restarts", job.restarts),
      fact("Checkpoints", `${job.checkpoints.counts.completed} completed, ${job.checkpoints.counts.failed} failed`),
      fact("Last checkpoint", age === null ? "-" : `${duration(age)} ago`)),
    job.error ? el("p", { class: "error" }, `Latest failure: ${job.error}`) : null,
    el("div", { class: "actions" },
      act("Trigger checkpoint", "POST", `${base}/checkpoints`),
      act("Cancel job", "PATCH", `${base}?mode=cancel`, "danger"),
      message));
}

// the job graph: vertices in columns by their distance from the sources
function graphSection(plan, vertices) {
  const metrics = Object.fromEntries(vertices.map((v) => [v.id, v.metrics]));
  const depth = {};
  const byId = Object.fromEntries(plan.nodes.map((n) => [n.id, n]));
  const depthOf = (id) => {
    if (depth[id] === undefined) {
      const inputs = byId[id].inputs;
      depth[id] = inputs.length ? 1 + Math.max(...inputs.map((i) => depthOf(i.id))) : 0;
    }
    return depth[id];
  };
  plan.nodes.forEach((n) => depthOf(n.id));
  const columns = {};
  plan.nodes.forEach((n) => (columns[depth[n.id]] = columns[depth[n.id]] || []).push(n));
  const W = 280, H = 92, GX = 90, GY = 26, PAD = 10;
  const pos = {};
  Object.entries(columns).forEach(([d, nodes]) => nodes.forEach((n, i) => {
    pos[n.id] = { x: PAD + Number(d) * (W + GX), y: PAD + i * (H + GY) };
  }));
  const width = PAD * 2 + (Object.keys(columns).length) * (W + GX) - GX;
  const height = PAD * 2 + Math.max(...Object.values(columns).map((c) => c.length)) * (H + GY) - GY;
  const edges = plan.edges.map((e) => {
    const a = pos[e.source], b = pos[e.target];
    const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2, mx = (x1 + x2) / 2;
    return svg("g", { class: "edge", "data-edge-id": e.id },
      svg("path", { d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2 - 6},${y2}`, "marker-end": "url(#arrow)" }),
      svg("text", { x: mx, y: (y1 + y2) / 2 - 5, "text-anchor": "middle" }, e.ship_strategy));
  });
  const boxes = plan.nodes.map((n) => {
    const m = metrics[n.id] || {};
    const level = m["backpressure-level"] || "ok";
    const { x, y } = pos[n.id];
    const name = n.description.length > 36 ? `${n.description.slice(0, 35)}…` : n.description;
    return svg("g", {
      class: `vertex ${level}`, "data-vertex-id": n.id, "data-records-in": m["read-records"] ?? 0,
      "data-records-out": m["write-records"] ?? 0, "data-backpressure": m["backpressure-ratio"] ?? 0,
    },
      svg("title", {}, n.description),
      svg("rect", { x, y, width: W, height: H }),
      svg("text", { class: "title", x: x + 10, y: y + 20 }, name),
      svg("text", { x: x + 10, y: y + 40 }, `parallelism ${n.parallelism} · ${count(m["read-records"])} in · ${count(m["write-records"])} out`),
      svg("text", { x: x + 10, y: y + 58 }, `${rate(m["read-records-per-second"] || 0)} in · ${rate(m["write-records-per-second"] || 0)} out`),
      svg("text", { x: x + 10, y: y + 76 }, `backpressure ${percent(m["backpressure-ratio"] || 0)} (${level}) · busy ${percent(m["busy-ratio"] || 0)}`));
  });
  const defs = svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" },
    svg("path", { d: "M0,0 L10,5 L0,10 z", fill: "#8a96a3" })));
  return el("section", { id: "graph" }, el("h2", {}, "Job graph"),
    el("div", { class: "graph" }, svg("svg", { width, height, viewBox: `0 0 ${width} ${height}` }, defs, edges, boxes)));
}

// throughput history per vertex, kept in this tab for the sparklines
function remember(job) {
  const key = `${job.jid}`;
  const series = (state.throughput[key] = state.throughput[key] || {});
  for (const v of job.vertices) {
    const values = (series[v.id] = series[v.id] || []);
    values.push(v.metrics["read-records-per-second"]);
    if (values.length > 60) values.shift();
  }
}

function sparkline(values) {
  const w = 120, h = 24, max = Math.max(1, ...values);
  const points = values.map((v, i) => `${(i / Math.max(values.length - 1, 1)) * w},${h - (v / max) * (h - 2) - 1}`).join(" ");
  return svg("svg", { class: "spark", width: w, height: h }, svg("polyline", { points }));
}

function throughputSection(job) {
  const series = state.throughput[job.jid] || {};
  const rows = [];
  for (const v of job.vertices) {
    const m = v.metrics;
    rows.push(el("tr", { class: "vertex-row", "data-vertex-id": v.id, "data-records-in": m["read-records"], "data-records-out": m["write-records"] },
      el("td", {}, el("b", {}, v.name)),
      el("td", { class: "num" }, v.parallelism),
      el("td", { class: "num" }, count(m["read-records"])),
      el("td", { class: "num" }, count(m["write-records"])),
      el("td", { class: "num" }, rate(m["read-records-per-second"])),
      el("td", { class: "num" }, rate(m["write-records-per-second"])),
      el("td", {}, bar(m["backpressure-ratio"], m["backpressure-level"]), `${percent(m["backpressure-ratio"])} `, badge(m["backpressure-level"])),
      el("td", {}, bar(m["busy-ratio"]), percent(m["busy-ratio"])),
      el("td", {}, sparkline(series[v.id] || []))));
    for (const s of v.subtasks) {
      rows.push(el("tr", { class: "subtask-row muted", "data-vertex-id": v.id, "data-subtask": s.subtask },
        el("td", {}, `  subtask ${s.subtask}`),
        el("td", {}),
        el("td", { class: "num" }, count(s["read-records"])),
        el("td", { class: "num" }, count(s["write-records"])),
        el("td", { class: "num" }, rate(s["read-records-per-second"])),
        el("td", { class: "num" }, rate(s["write-records-per-second"])),
        el("td", {}, bar(s["backpressure-ratio"], s["backpressure-level"]), percent(s["backpressure-ratio"])),
        el("td", {}, bar(s["busy-ratio"]), percent(s["busy-ratio"])),
        el("td", {})));
    }
  }
  const head = ["Vertex", "Parallelism", "Records in", "Records out", "In", "Out", "Backpressure", "Busy", "Records in/s"];
  return el("section", { id: "throughput" }, el("h2", {}, "Throughput and backpressure"),
    el("table", {}, el("thead", {}, el("tr", {}, head.map((h, i) => el("th", { class: i >= 1 && i <= 5 ? "num" : null }, h)))), el("tbody", {}, rows)));
}

function checkpointSection(job, cp, details) {
  const c = cp.counts;
  const summaryRow = (label, s, show) => el("tr", {}, el("td", {}, label),
    el("td", { class: "num" }, s.min === null ? "-" : show(s.min)),
    el("td", { class: "num" }, s.avg === null ? "-" : show(s.avg)),
    el("td", { class: "num" }, s.max === null ? "-" : show(s.max)));
  const card = (title, entry, describe) => el("div", { class: "card", "data-latest": title },
    el("h3", {}, title), entry ? describe(entry) : el("p", { class: "muted" }, "none"));
  const describeDone = (e) => [
    el("p", {}, el("b", {}, `#${e.id}`), ` ${e.checkpoint_type.toLowerCase().replace("_", " ")} at ${time(e.completion_timestamp)}`),
    el("p", {}, `${duration(e.end_to_end_duration)}, ${bytes(e.state_size)} state, ${bytes(e.persisted_data)} in flight`),
    el("p", { class: "mono" }, e.external_path || ""),
  ];
  const latest = cp.latest;
  const history = cp.history.map((h) => el("tr", {
    class: `checkpoint clickable${details && details.id === h.id ? " selected" : ""}`,
    "data-checkpoint-id": h.id, "data-status": h.status,
    onclick: () => { location.hash = `#/jobs/${job.jid}/checkpoints/${h.id}`; },
  },
    el("td", { class: "num" }, h.id),
    el("td", {}, badge(h.status)),
    el("td", {}, h.checkpoint_type.toLowerCase().replaceAll("_", " ")),
    el("td", {}, time(h.trigger_timestamp)),
    el("td", { class: "num" }, duration(h.end_to_end_duration)),
    el("td", { class: "num" }, bytes(h.state_size)),
    el("td", { class: "num" }, bytes(h.persisted_data)),
    el("td", { class: "num" }, `${h.num_acknowledged_subtasks}/${h.num_subtasks}`),
    el("td", {}, h.failure_message || "")));
  const historyHead = ["Id", "Status", "Type", "Triggered", "End to end", "State size", "In-flight data", "Acknowledged", "Failure"];
  return el("section", { id: "checkpoints", "data-completed": c.completed },
    el("h2", {}, "Checkpoints"),
    el("div", { class: "facts" }, ["total", "in_progress", "completed", "failed", "restored"].map((k) =>
      el("div", { "data-count": k }, el("span", {}, k.replace("_", " ")), el("b", {}, c[k])))),
    el("div", { class: "cards" },
      card("latest completed", latest.completed, describeDone),
      card("latest savepoint", latest.savepoint, describeDone),
      card("latest failed", latest.failed, (e) => [
        el("p", {}, el("b", {}, `#${e.id}`), ` at ${time(e.failure_timestamp)}`), el("p", { class: "error" }, e.failure_message)]),
      card("latest restored", latest.restored, (e) => [
        el("p", {}, el("b", {}, `#${e.id}`), ` ${e.is_savepoint ? "savepoint" : "checkpoint"} at ${time(e.restore_timestamp)}`),
        el("p", { class: "mono" }, e.external_path)])),
    el("h3", {}, "Summary of completed checkpoints"),
    el("table", {}, el("thead", {}, el("tr", {}, ["", "min", "avg", "max"].map((h) => el("th", { class: h ? "num" : null }, h)))),
      el("tbody", {},
        summaryRow("End to end duration", cp.summary.end_to_end_duration, duration),
        summaryRow("State size", cp.summary.state_size, bytes),
        summaryRow("Persisted in-flight data", cp.summary.persisted_data, bytes))),
    el("h3", {}, `History (newest ${cp.history.length}; click a row for its subtasks)`),
    el("table", { id: "checkpoint-history" }, el("thead", {}, el("tr", {}, historyHead.map((h) => el("th", {}, h)))), el("tbody", {}, history)),
    details ? detailsView(details) : null);
}

function detailsView(d) {
  if (d.error) return el("div", { class: "details error" }, d.error);
  const head = ["Subtask", "Acknowledged", "End to end", "Sync", "Async", "Alignment", "Start delay", "State size", "In-flight data", "Unaligned"];
  const tasks = Object.values(d.tasks).map((t) => [
    el("h3", {}, `${t.name} (${t.num_acknowledged_subtasks}/${t.num_subtasks} acknowledged, ${bytes(t.state_size)})`),
    el("table", { class: "subtasks", "data-vertex-id": t.id }, el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))),
      el("tbody", {}, t.subtasks.map((s) => el("tr", { class: "subtask", "data-subtask": s.index, "data-status": s.status },
        el("td", { class: "num" }, s.index),
        ...(s.ack_timestamp === undefined
          ? [el("td", { colspan: 9, class: "muted" }, "not acknowledged")]
          : [
            el("td", {}, time(s.ack_timestamp)),
            el("td", { class: "num" }, duration(s.end_to_end_duration)),
            el("td", { class: "num" }, duration(s.checkpoint.sync)),
            el("td", { class: "num" }, duration(s.checkpoint.async)),
            el("td", { class: "num" }, duration(s.alignment.duration)),
            el("td", { class: "num" }, duration(s.start_delay)),
            el("td", { class: "num" }, bytes(s.state_size)),
            el("td", { class: "num" }, bytes(s.persisted_data)),
            el("td", {}, s.unaligned_checkpoint ? "yes" : "no"),
          ])))))]);
  return el("div", { class: "details", id: "checkpoint-details", "data-checkpoint-id": d.id },
    el("h2", {}, `Checkpoint ${d.id} `, badge(d.status)),
    el("p", {}, `${d.checkpoint_type.toLowerCase().replaceAll("_", " ")}, triggered ${time(d.trigger_timestamp)}, ${duration(d.end_to_end_duration)} end to end`),
    d.external_path ? el("p", { class: "mono" }, d.external_path) : null,
    d.failure_message ? el("p", { class: "error" }, d.failure_message) : null,
    tasks);
}

function historySection(cp, exceptions) {
  const restores = exceptions.restores.map((r) => el("tr", { class: "restore" },
    el("td", {}, time(r.restore_timestamp)), el("td", { class: "num" }, r.attempt),
    el("td", { class: "num" }, `#${r.id}`), el("td", {}, r.is_savepoint ? "savepoint" : "checkpoint"),
    el("td", { class: "mono" }, r.external_path)));
  const failures = exceptions.exceptionHistory.entries.map((e) => el("tr", { class: "failure" },
    el("td", {}, time(e.timestamp)), el("td", { class: "num" }, e.attempt),
    el("td", {}, e.message, e.stacktrace ? el("details", {}, el("summary", {}, "traceback"), el("pre", {}, e.stacktrace)) : null)));
  return el("section", { id: "restarts" },
    el("h2", {}, `Restarts and restores (${exceptions.restarts} restarts)`),
    el("h3", {}, "Restores"),
    restores.length
      ? el("table", {}, el("thead", {}, el("tr", {}, ["Restored", "Attempt", "Checkpoint", "Kind", "Path"].map((h) => el("th", {}, h)))), el("tbody", {}, restores))
      : el("p", { class: "muted" }, "Not restored."),
    el("h3", {}, "Failures"),
    failures.length
      ? el("table", {}, el("thead", {}, el("tr", {}, ["Time", "Attempt", "Failure"].map((h) => el("th", {}, h)))), el("tbody", {}, failures))
      : el("p", { class: "muted" }, "No failures."),
    exceptions.exceptionHistory.truncated ? el("p", { class: "muted" }, "Older failures were dropped.") : null);
}

document.addEventListener("DOMContentLoaded", start);
