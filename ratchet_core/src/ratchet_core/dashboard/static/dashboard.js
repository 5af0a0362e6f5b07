// Ratchet dashboard: a small hash-routed page over the JSON API (relative URLs, so it works
// wherever the dashboard is mounted). No dependencies, nothing loaded from elsewhere.
"use strict";

const STATUSES = ["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "PAUSED",
  "AWAITING_SIGNAL", "WAITING"];
const ACTIONS = ["retry", "cancel", "pause", "resume", "delete"];
let readOnly = false;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  return node;
}

async function api(path, options) {
  const response = await fetch("api/" + path, options);
  const body = await response.json().catch(() => ({ error: response.statusText }));
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function show(text, isError) {
  const box = document.getElementById("message");
  box.textContent = text;
  box.className = isError ? "error" : "";
  box.hidden = !text;
}

// A time as <time datetime="ISO" title="YYYY-MM-DD hh:mm:ss UTC">, shown in the browser's zone.
function utcText(date) {
  return date.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

function when(iso) {
  if (!iso) return "–";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return String(iso);
  return el("time", { datetime: date.toISOString(), title: utcText(date) }, date.toLocaleString());
}

function statusBadge(status) {
  return el("span", { class: "status status-" + status, "data-status": status }, status);
}

function setView(...children) {
  const view = document.getElementById("view");
  view.replaceChildren(...children);
}

function activeNav(id) {
  for (const a of document.querySelectorAll("header nav a")) {
    a.classList.toggle("active", a.id === id);
  }
}

// ------------------------------------------------------------------ overview

async function overview() {
  activeNav("nav-overview");
  const data = await api("overview");
  if (!data.available) {
    setView(el("h2", {}, "Overview"), el("p", { class: "muted" },
      "The store has no analytics capability."));
    return;
  }
  const cards = el("div", { class: "cards", id: "status-counts" },
    STATUSES.map((s) => el("a", { href: "#/jobs?status=" + s },
      el("div", { class: "card", "data-count-status": s },
        el("div", { class: "label" }, s),
        el("div", { class: "value" }, data.counts[s] || 0)))));
  const pct = (v) => (v === null ? "–" : v.toFixed(2) + " s");
  const rates = el("div", { class: "cards" },
    el("div", { class: "card" }, el("div", { class: "label" }, "throughput / min (1 h)"),
      el("div", { class: "value", id: "throughput" }, data.throughput_per_minute)),
    el("div", { class: "card" }, el("div", { class: "label" }, "failure rate (1 h)"),
      el("div", { class: "value", id: "failure-rate" }, (data.failure_rate * 100).toFixed(1) + " %")),
    ...Object.entries(data.queue_wait_seconds).map(([p, v]) =>
      el("div", { class: "card" }, el("div", { class: "label" }, "queue wait " + p),
        el("div", { class: "value" }, pct(v)))),
    ...Object.entries(data.execution_seconds).map(([p, v]) =>
      el("div", { class: "card" }, el("div", { class: "label" }, "run time " + p),
        el("div", { class: "value" }, pct(v)))));
  setView(el("h2", {}, "Overview"), cards, rates,
    el("h3", {}, "Finished jobs per 5 minutes (green: succeeded, red: failed)"), chart(data.series));
}

function chart(series) {
  const width = 720, height = 160, gap = 6;
  const max = Math.max(1, ...series.map((p) => p.SUCCEEDED + p.FAILED));
  const barWidth = (width - gap * series.length) / series.length;
  const root = svg("svg", { width, height: height + 20, viewBox: `0 0 ${width} ${height + 20}`,
    id: "throughput-chart", role: "img" });
  series.forEach((point, i) => {
    const x = i * (barWidth + gap);
    const ok = (point.SUCCEEDED / max) * height;
    const failed = (point.FAILED / max) * height;
    root.append(svg("rect", { x, y: height - ok - failed, width: barWidth, height: failed, class: "bar-failed" }));
    root.append(svg("rect", { x, y: height - ok, width: barWidth, height: ok, class: "bar-ok" }));
    const label = svg("text", { x: x + barWidth / 2, y: height + 14, "text-anchor": "middle",
      "font-size": 10, fill: "#667085" });
    const start = new Date(point.start);
    label.textContent = start.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
    const hover = svg("title", {});
    hover.textContent = utcText(start);
    label.append(hover);
    root.append(label);
  });
  return el("div", { class: "chart" }, root);
}

// ------------------------------------------------------------------ jobs

async function jobs(params) {
  activeNav("nav-jobs");
  const status = el("select", { id: "status-filter" },
    el("option", { value: "" }, "any status"),
    STATUSES.map((s) => el("option", { value: s, selected: params.get("status") === s }, s)));
  const target = el("input", { id: "target-filter", placeholder: "target module:function",
    value: params.get("target") || "" });
  const tag = el("input", { id: "tag-filter", placeholder: "tag", value: params.get("tag") || "" });
  const search = el("input", { id: "search", placeholder: "job id", value: params.get("q") || "" });
  const apply = () => {
    const next = new URLSearchParams();
    for (const [key, input] of [["status", status], ["target", target], ["tag", tag], ["q", search]]) {
      if (input.value.trim()) next.set(key, input.value.trim());
    }
    location.hash = "#/jobs?" + next.toString();
  };
  for (const input of [target, tag, search]) {
    input.addEventListener("keydown", (e) => { if (e.key === "Enter") apply(); });
  }
  const filters = el("div", { class: "filters" }, status, target, tag, search,
    el("button", { id: "apply-filters", onclick: apply }, "Filter"));
  const offset = Number(params.get("offset") || 0);
  const query = new URLSearchParams(params);
  query.set("limit", "50");
  const data = await api("jobs?" + query.toString());
  const rows = data.jobs.map((job) => el("tr", {
    class: "job-row", "data-id": job.id,
    onclick: () => { location.hash = "#/jobs/" + job.id; },
  },
  el("td", {}, el("a", { href: "#/jobs/" + job.id, class: "job-link" }, job.id.slice(0, 13) + "…")),
  el("td", {}, statusBadge(job.status)),
  el("td", {}, job.target),
  el("td", {}, job.tags.join(", ")),
  el("td", {}, `${job.attempt}/${job.max_retries + 1}`),
  el("td", {}, when(job.created_at)),
  el("td", {}, when(job.finished_at)),
  el("td", { class: "muted" }, job.last_error || "")));
  const table = el("table", { id: "jobs-table" },
    el("thead", {}, el("tr", {}, ["id", "status", "target", "tags", "attempt", "created",
      "finished", "error"].map((h) => el("th", {}, h)))),
    el("tbody", {}, rows));
  const page = (delta) => {
    const next = new URLSearchParams(params);
    next.set("offset", String(Math.max(0, offset + delta)));
    location.hash = "#/jobs?" + next.toString();
  };
  const pager = el("div", { class: "pager" },
    el("button", { class: "secondary", disabled: offset === 0, onclick: () => page(-50) }, "‹ newer"),
    el("span", { id: "jobs-total" }, `${data.total} job(s)` + (data.total ? `, ${offset + 1}–${offset + data.jobs.length}` : "")),
    el("button", { class: "secondary", disabled: offset + data.jobs.length >= data.total, onclick: () => page(50) }, "older ›"));
  setView(el("h2", {}, "Jobs"), filters,
    data.available ? table : el("p", { class: "muted" }, "The store cannot list jobs."), pager);
}

// ------------------------------------------------------------------ job detail

async function job(id) {
  activeNav("nav-jobs");
  const data = await api("jobs/" + encodeURIComponent(id));
  const fields = [
    ["id", data.id], ["status", statusBadge(data.status)], ["target", data.target],
    ["priority", data.priority], ["attempt", `${data.attempt} of ${data.max_retries + 1}`],
    ["tags", data.tags.join(", ") || "–"], ["created", when(data.created_at)],
    ["scheduled", when(data.scheduled_at)], ["started", when(data.started_at)],
    ["finished", when(data.finished_at)], ["owner", data.owner || "–"],
    ["archived", data.archived ? "yes" : "no"],
  ];
  if (data.parent_id) fields.push(["parent", el("a", { href: "#/jobs/" + data.parent_id }, data.parent_id)]);
  if (data.batch_id) fields.push(["batch", data.batch_id]);
  if (data.idempotency_key) fields.push(["idempotency key", data.idempotency_key]);
  const list = el("dl", { id: "job-fields" }, fields.map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
  const s = data.status;
  const applies = {
    retry: s === "FAILED", cancel: !["SUCCEEDED", "FAILED", "CANCELLED"].includes(s),
    pause: s === "PENDING", resume: s === "PAUSED", delete: s !== "RUNNING",
  };
  const buttons = readOnly || data.archived ? [] : ACTIONS.filter((a) => applies[a]).map((action) => el("button", {
    id: "action-" + action, class: action === "delete" ? "danger" : "secondary",
    onclick: () => act(data.id, action),
  }, action));
  const parts = [el("h2", {}, "Job ", el("span", { id: "job-status" }, statusBadge(data.status))),
    el("div", { class: "actions" }, buttons), list,
    el("h3", {}, "Arguments (sensitive fields masked)"),
    el("pre", { id: "job-args" }, data.args === null ? data.payload_note
      : JSON.stringify({ args: data.args, kwargs: data.kwargs }, null, 2))];
  if (data.result !== null) parts.push(el("h3", {}, "Result"), el("pre", { id: "job-result" }, JSON.stringify(data.result, null, 2)));
  if (data.last_error) parts.push(el("h3", {}, "Error"), el("pre", { id: "job-error" }, data.last_error));
  parts.push(el("h3", {}, "Executions"), el("table", { id: "executions" },
    el("thead", {}, el("tr", {}, ["attempt", "status", "node", "started", "duration", "error"].map((h) => el("th", {}, h)))),
    el("tbody", {}, data.executions.map((e) => el("tr", {},
      el("td", {}, e.attempt), el("td", {}, statusBadge(e.status)), el("td", {}, e.node),
      el("td", {}, when(e.started_at)), el("td", {}, e.duration_ms === null ? "–" : e.duration_ms + " ms"),
      el("td", { class: "muted" }, e.error || ""))))));
  parts.push(el("h3", {}, "Log"), el("pre", { id: "job-logs" },
    data.logs.length ? data.logs.map((l, i) => [i ? "\n" : "", when(l.at),
      ` ${l.level.padEnd(7)} [${l.attempt}] ${l.message}`]) : "no log lines"));
  if (data.children.length) {
    parts.push(el("h3", {}, "Children"), el("ul", {}, data.children.map((c) =>
      el("li", {}, el("a", { href: "#/jobs/" + c.id }, c.id), " ", statusBadge(c.status)))));
  }
  setView(...parts);
}

async function act(id, action) {
  if (action === "delete" && !window.confirm("Delete job " + id + "?")) return;
  try {
    const result = await api(`jobs/${encodeURIComponent(id)}/${action}`, {
      method: "POST", headers: { "X-Ratchet-Dashboard": "1" },
    });
    show(`job ${id}: ${action} done (now ${result.status || "deleted"})`, false);
    if (action === "delete") location.hash = "#/jobs";
    else await job(id);
  } catch (error) {
    show(error.message, true);
  }
}

// ------------------------------------------------------------------ nodes, schedules

async function nodes() {
  activeNav("nav-nodes");
  const data = await api("nodes");
  const rows = data.nodes.map((n) => el("tr", { "data-node": n.node_id },
    el("td", {}, n.node_id), el("td", {}, `${n.host} (pid ${n.pid})`),
    el("td", {}, when(n.started_at)), el("td", {}, `${n.heartbeat_age_seconds} s ago`),
    el("td", { class: n.alive ? "alive" : "dead" }, n.alive ? "alive" : "silent"),
    el("td", {}, n.running_jobs), el("td", {}, n.tags.join(", "))));
  setView(el("h2", {}, "Nodes"), el("table", { id: "nodes-table" },
    el("thead", {}, el("tr", {}, ["node", "host", "started", "heartbeat", "state", "running", "tags"].map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: 7, class: "muted" }, "no worker is registered")))));
}

async function recurring() {
  activeNav("nav-recurring");
  const data = await api("recurring");
  const rows = data.schedules.map((r) => el("tr", {},
    el("td", {}, r.name), el("td", {}, r.target), el("td", {}, `${r.cron} (${r.timezone})`),
    el("td", {}, r.enabled ? "yes" : "no"), el("td", {}, when(r.next_fire_at)), el("td", {}, when(r.last_fired_at)),
    el("td", { class: "misfires", title: "misfire policy " + r.misfire_policy },
      r.misfires === null || r.misfires === undefined ? "–" : r.misfires)));
  setView(el("h2", {}, "Recurring schedules"), data.available ? el("table", { id: "recurring-table" },
    el("thead", {}, el("tr", {}, ["name", "target", "cron", "enabled", "next", "last", "misfires"].map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: 7, class: "muted" }, "no schedules"))))
    : el("p", { class: "muted" }, "The store has no recurring capability."));
}

// ------------------------------------------------------------------ router

// Pages of operator.js (window.ratchetRoutes: [regex, handler(match, params)] pairs).
async function extraRoute(path, params) {
  for (const [pattern, handler] of window.ratchetRoutes || []) {
    const match = path.match(pattern);
    if (match) { await handler(match, params); return true; }
  }
  return false;
}

async function route() {
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  const params = new URLSearchParams(query || "");
  try {
    if (path === "/" || path === "") await overview();
    else if (path === "/jobs") await jobs(params);
    else if (path.startsWith("/jobs/")) await job(path.slice(6));
    else if (path === "/nodes") await nodes();
    else if (path === "/recurring") await recurring();
    else if (!(await extraRoute(path, params))) setView(el("p", {}, "No such page."));
    if (window.ratchetAfterRender) window.ratchetAfterRender(path, params);
    document.body.dataset.loaded = hash;
  } catch (error) {
    setView(el("p", { class: "error", id: "load-error" }, error.message));
  }
}

window.addEventListener("hashchange", () => { show("", false); route(); });
api("config").then((config) => {
  readOnly = config.read_only;
  if (readOnly) document.getElementById("mode").textContent = "read-only";
}).catch(() => {}).finally(route);
