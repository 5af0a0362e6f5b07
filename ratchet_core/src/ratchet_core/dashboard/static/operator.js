// Ratchet dashboard, operator pages (issue 28): batches, workflow graph, signals, queues and
// targets, schedule actions, bulk actions on the job list, live refresh and dark mode. Uses the
// helpers of dashboard.js (el, svg, api, show, when, statusBadge, setView, activeNav, readOnly)
// and registers its routes in window.ratchetRoutes; nothing is loaded from elsewhere.
"use strict";

const ACTION_HEADERS = { "X-Ratchet-Dashboard": "1", "Content-Type": "application/json" };

// setView without the parts a page leaves out (null)
function page(...parts) {
  setView(...parts.filter((part) => part !== null && part !== undefined));
}

function post(path, body) {
  return api(path, { method: "POST", headers: ACTION_HEADERS, body: JSON.stringify(body) });
}

function table(id, headings, rows, empty) {
  return el("table", { id },
    el("thead", {}, el("tr", {}, headings.map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, rows.length ? rows
      : el("tr", {}, el("td", { colspan: headings.length, class: "muted" }, empty))));
}

function progress(batch) {
  const ok = batch.total ? (100 * batch.succeeded) / batch.total : 0;
  const bad = batch.total ? (100 * batch.failed) / batch.total : 0;
  const part = (cls, width) => {
    const span = el("span", { class: cls });
    span.style.width = width + "%"; // a CSSOM property: the page's CSP forbids style attributes
    return span;
  };
  return el("div", { class: "progress", title: `${batch.percent}% finished`, "data-percent": batch.percent },
    part("progress-ok", ok), part("progress-failed", bad));
}

function jobLink(id) {
  return el("a", { href: "#/jobs/" + id, class: "job-link" }, id.slice(0, 13) + "…");
}

// ------------------------------------------------------------------ batches

async function batches(params) {
  activeNav("nav-batches");
  const data = await api("batches?" + params.toString());
  if (!data.available) {
    page(el("h2", {}, "Batches"), el("p", { class: "muted" }, "The store keeps no batches."));
    return;
  }
  const rows = data.batches.map((b) => el("tr", { class: "batch-row", "data-id": b.id },
    el("td", {}, el("a", { href: "#/batches/" + b.id }, b.name || b.id.slice(0, 13))),
    el("td", {}, statusBadge(b.status)), el("td", {}, progress(b)),
    el("td", {}, `${b.succeeded} ok · ${b.failed} failed · ${b.pending} pending / ${b.total}`),
    el("td", {}, when(b.created_at)), el("td", {}, when(b.completed_at))));
  page(el("h2", {}, "Batches"),
    table("batches-table", ["batch", "status", "progress", "counts", "created", "completed"], rows, "no batches"));
}

async function batch(id, params) {
  activeNav("nav-batches");
  const data = await api(`batches/${encodeURIComponent(id)}?` + params.toString());
  const status = el("select", { id: "batch-status-filter", onchange: (e) => {
    const next = new URLSearchParams(params);
    if (e.target.value) next.set("status", e.target.value); else next.delete("status");
    location.hash = `#/batches/${id}?` + next.toString();
  } }, el("option", { value: "" }, "any status"),
  STATUSES.map((s) => el("option", { value: s, selected: params.get("status") === s }, s)));
  const counts = el("div", { class: "cards", id: "batch-counts" },
    [["total", data.total], ["succeeded", data.succeeded], ["failed", data.failed],
      ["pending", data.pending], ["finished", data.percent + " %"]].map(([label, value]) =>
      el("div", { class: "card", "data-count": label },
        el("div", { class: "label" }, label), el("div", { class: "value" }, value))));
  const callbacks = data.callbacks.map((c) => el("tr", {},
    el("td", {}, jobLink(c.id)), el("td", {}, statusBadge(c.status)), el("td", {}, c.target)));
  const children = data.children.jobs.map((c) => el("tr", { class: "job-row", "data-id": c.id },
    el("td", {}, jobLink(c.id)), el("td", {}, statusBadge(c.status)), el("td", {}, c.target),
    el("td", {}, when(c.finished_at)), el("td", { class: "muted" }, c.last_error || "")));
  page(el("h2", {}, "Batch ", data.name || data.id, " ", statusBadge(data.status)),
    counts, progress(data),
    data.last_error ? el("p", { class: "error" }, data.last_error) : null,
    el("h3", {}, "Callbacks"), table("batch-callbacks", ["job", "status", "target"], callbacks, "no callbacks"),
    el("h3", {}, `Children (${data.children.total})`), el("div", { class: "filters" }, status),
    table("batch-children", ["job", "status", "target", "finished", "error"], children, "no children match"));
}

// ------------------------------------------------------------------ workflow graph

async function workflow(id) {
  activeNav("nav-jobs");
  const data = await api(`jobs/${encodeURIComponent(id)}/workflow`);
  const columns = new Map();
  for (const node of data.nodes) {
    if (!columns.has(node.depth)) columns.set(node.depth, []);
    columns.get(node.depth).push(node);
  }
  const boxW = 190, boxH = 54, gapX = 150, gapY = 22;
  const place = new Map();
  let rowsMax = 1;
  for (const [depth, nodes] of columns) {
    rowsMax = Math.max(rowsMax, nodes.length);
    nodes.forEach((node, row) => place.set(node.id, { x: 10 + depth * (boxW + gapX), y: 10 + row * (boxH + gapY), node }));
  }
  const width = 20 + columns.size * (boxW + gapX), height = 20 + rowsMax * (boxH + gapY);
  const graph = svg("svg", { id: "workflow-graph", width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
  for (const edge of data.edges) {
    const a = place.get(edge.from), b = place.get(edge.to);
    if (!a || !b) continue;
    const line = svg("line", { x1: a.x + boxW, y1: a.y + boxH / 2, x2: b.x, y2: b.y + boxH / 2,
      class: "edge edge-" + edge.state.replace(" ", "-"), "data-from": edge.from, "data-to": edge.to });
    graph.append(line);
    const label = svg("text", { x: (a.x + boxW + b.x) / 2, y: (a.y + b.y + boxH) / 2 - 4,
      "text-anchor": "middle", class: "edge-label" });
    label.textContent = [edge.condition, edge.state].filter(Boolean).join(" · ");
    graph.append(label);
  }
  for (const { x, y, node } of place.values()) {
    const link = svg("a", { href: "#/jobs/" + node.id, class: "wf-node", "data-id": node.id, "data-status": node.status });
    link.append(svg("rect", { x, y, width: boxW, height: boxH, rx: 6, class: "wf-box status-" + node.status + (node.id === data.job_id ? " wf-current" : "") }));
    const title = svg("text", { x: x + 8, y: y + 20, class: "wf-title" });
    title.textContent = node.target.split(":").pop() + (node.signal_key ? " ⏳" + node.signal_key : "");
    const sub = svg("text", { x: x + 8, y: y + 40, class: "wf-sub" });
    sub.textContent = node.status + " · " + node.id.slice(0, 8);
    link.append(title, sub);
    graph.append(link);
  }
  page(el("h2", {}, "Workflow of ", jobLink(data.job_id)),
    el("p", { class: "muted" }, "Each step waits on the one to its left: waiting (dashed), released, or not taken (a branch side or a cancelled step)."),
    el("div", { class: "chart" }, graph),
    data.truncated ? el("p", { class: "muted" }, "Only the first 500 jobs are drawn.") : null);
}

// ------------------------------------------------------------------ signals

async function signals(params) {
  activeNav("nav-signals");
  const data = await api("signals?" + params.toString());
  const rows = data.jobs.map((j) => el("tr", { class: "signal-row", "data-id": j.id, "data-key": j.signal_key },
    el("td", {}, jobLink(j.id)), el("td", {}, j.target), el("td", {}, el("code", {}, j.signal_key)),
    el("td", {}, when(j.signal_deadline)),
    el("td", {}, j.seconds_left === null ? "no deadline" : Math.round(j.seconds_left) + " s"),
    el("td", {}, readOnly ? "" : el("button", { class: "secondary send-to-job", onclick: () => fill(j.id, "") }, "signal"))));
  const target = el("input", { id: "signal-target", placeholder: "signal key or job id", value: params.get("key") || "" });
  const payload = el("textarea", { id: "signal-payload", rows: 2, placeholder: 'payload (JSON), e.g. {"by": "ann"}' });
  const fill = (jobId) => { target.value = jobId; payload.focus(); };
  const send = async () => {
    let value = null;
    try { value = payload.value.trim() ? JSON.parse(payload.value) : null; } catch (e) {
      show("the payload is not JSON: " + e.message, true); return;
    }
    const text = target.value.trim();
    const isId = /^[0-9a-f]{8}-[0-9a-f]{4}-/i.test(text);
    try {
      const answer = await post("signals", isId ? { job_id: text, payload: value } : { key: text, payload: value });
      show(`signal ${answer.target}: ${answer.outcome}`, !answer.delivered);
      await signals(params);
    } catch (error) { show(error.message, true); }
  };
  page(el("h2", {}, `Awaiting a signal (${data.total})`),
    readOnly ? null : el("div", { class: "filters", id: "signal-form" }, target, payload,
      el("button", { id: "send-signal", onclick: send }, "Send signal")),
    table("signals-table", ["job", "target", "key", "deadline", "left", ""], rows, "no job awaits a signal"));
}

// ------------------------------------------------------------------ queues and targets

async function queues(params) {
  activeNav("nav-queues");
  const data = await api("queues?" + params.toString());
  if (!data.available) {
    page(el("h2", {}, "Queues"), el("p", { class: "muted" }, "The store cannot list jobs."));
    return;
  }
  const rowsOf = (list, kind) => list.map((r) => el("tr", { class: "queue-row", "data-name": r.name },
    el("td", {}, kind === "target" && r.name
      ? el("a", { href: "#/jobs?target=" + encodeURIComponent(r.name) }, r.name) : (r.name || "(no label)")),
    el("td", {}, r.depth), el("td", {}, r.due),
    el("td", {}, r.oldest_due_seconds === null ? "–" : r.oldest_due_seconds + " s"),
    el("td", {}, r.running), el("td", {}, r.per_minute), el("td", {}, (r.failure_rate * 100).toFixed(1) + " %")));
  const heads = ["name", "pending", "due", "oldest due", "running", "done / min", "failure rate"];
  page(el("h2", {}, "Queues and targets"),
    el("p", { class: "muted" }, `Over the last ${data.window_seconds / 60} min; ${data.scanned} jobs read` +
      (data.truncated ? " (more exist: figures cover the newest)" : "") + ". " + data.pause.reason + "."),
    el("h3", {}, "Execution target labels"), table("labels-table", heads, rowsOf(data.labels, "label"), "no jobs"),
    el("h3", {}, "Job targets"), table("targets-table", heads, rowsOf(data.targets, "target"), "no jobs"));
}

// ------------------------------------------------------------------ schedules

async function schedule(name) {
  activeNav("nav-recurring");
  const data = await api("recurring/" + encodeURIComponent(name));
  const act = async (action) => {
    try {
      const answer = await post(`recurring/${encodeURIComponent(name)}/${action}`, {});
      show(action === "trigger" ? `triggered: job ${answer.job_id}` : `${name}: ${action} done`, false);
      await schedule(name);
    } catch (error) { show(error.message, true); }
  };
  const buttons = readOnly ? [] : [
    el("button", { id: "schedule-trigger", onclick: () => act("trigger") }, "Trigger now"),
    data.enabled ? el("button", { id: "schedule-pause", class: "secondary", onclick: () => act("pause") }, "Pause")
      : el("button", { id: "schedule-resume", class: "secondary", onclick: () => act("resume") }, "Resume")];
  const late = (s) => (s < 120 ? Math.round(s) + " s" : s < 7200 ? Math.round(s / 60) + " min" : Math.round(s / 3600) + " h");
  const misfire = (f) => (!f.misfire ? "" : f.skipped ? `skipped ${f.missed} slot(s) (${f.policy})`
    : `late by ${late(f.late_seconds)}` + (f.missed ? `, ${f.missed} slot(s) without a job` : "") + ` (${f.policy})`);
  const firings = data.firings.map((j) => el("tr", { class: j.misfire ? "firing misfire" : "firing" },
    el("td", {}, jobLink(j.id)), el("td", {}, statusBadge(j.status)), el("td", {}, when(j.scheduled_at)),
    el("td", {}, when(j.fired_at)), el("td", {}, when(j.finished_at)),
    el("td", { class: "misfire-note" }, misfire(j)), el("td", { class: "muted" }, j.skipped ? "" : j.last_error || "")));
  page(el("h2", {}, "Schedule ", data.name, " ", el("span", { id: "schedule-state" }, data.enabled ? "active" : "paused")),
    el("div", { class: "actions" }, buttons),
    el("dl", {}, [["target", data.target], ["cron", `${data.cron} (${data.timezone})`],
      ["misfire policy", data.misfire_policy],
      ["misfires", el("span", { id: "schedule-misfires" }, data.misfires === null ? "not recorded by this store" : data.misfires)],
      ["next", when(data.next_fire_at)], ["last", when(data.last_fired_at)]]
      .map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])),
    el("h3", {}, "Recent firings"), table("firings-table", ["job", "status", "due", "fired", "finished", "misfire", "error"], firings, "not fired yet"));
}

function enhanceSchedules() {
  for (const row of document.querySelectorAll("#recurring-table tbody tr")) {
    const cell = row.querySelector("td");
    if (!cell || cell.classList.contains("muted") || cell.querySelector("a")) continue;
    const name = cell.textContent;
    cell.replaceChildren(el("a", { href: "#/recurring/" + encodeURIComponent(name), class: "schedule-link" }, name));
  }
}

// ------------------------------------------------------------------ bulk actions on the job list

function enhanceJobs(params) {
  const tableNode = document.getElementById("jobs-table");
  if (!tableNode || readOnly || tableNode.dataset.bulk) return;
  tableNode.dataset.bulk = "1";
  const all = el("input", { type: "checkbox", id: "select-page", title: "select this page" });
  tableNode.querySelector("thead tr").prepend(el("th", {}, all));
  for (const row of tableNode.querySelectorAll("tbody tr.job-row")) {
    const box = el("input", { type: "checkbox", class: "select-job", value: row.dataset.id,
      "aria-label": "select job " + row.dataset.id });
    box.addEventListener("click", (e) => e.stopPropagation());
    row.prepend(el("td", {}, box));
  }
  all.addEventListener("change", () => {
    for (const box of tableNode.querySelectorAll(".select-job")) box.checked = all.checked;
  });
  const scope = el("select", { id: "bulk-scope" },
    el("option", { value: "selected" }, "selected jobs"),
    el("option", { value: "filter" }, "all jobs matching this filter"));
  const action = el("select", { id: "bulk-action" },
    ["retry", "cancel", "pause", "resume", "delete"].map((a) => el("option", { value: a }, a)));
  const run = async () => {
    const filter = {};
    for (const key of ["status", "target", "tag"]) if (params.get(key)) filter[key] = params.get(key);
    const selection = scope.value === "filter" ? { filter }
      : { ids: [...tableNode.querySelectorAll(".select-job:checked")].map((b) => b.value) };
    if (selection.ids && !selection.ids.length) { show("select jobs first", true); return; }
    try {
      const counted = await post("bulk", { action: action.value, ...selection, dry_run: true });
      if (!window.confirm(`${action.value} ${counted.selected} job(s)?`)) return;
      const done = await post("bulk", { action: action.value, ...selection, confirm: counted.selected });
      show(`${done.action}: ${done.changed} changed, ${done.skipped} skipped` +
        (done.missing ? `, ${done.missing} gone` : ""), false);
      await route();
    } catch (error) { show(error.message, true); }
  };
  const bar = el("div", { class: "filters", id: "bulk-bar" }, "Bulk:", action, scope,
    el("button", { id: "bulk-run", class: "secondary", onclick: run }, "Apply…"));
  tableNode.before(bar);
}

function enhanceJob(id) {
  const fields = document.getElementById("job-fields");
  if (!fields || document.getElementById("workflow-link")) return;
  const dd = (node) => [el("dt", {}, node[0]), el("dd", {}, node[1])];
  fields.append(...dd(["workflow", el("a", { href: `#/workflow/${id}`, id: "workflow-link" }, "show the graph")]));
  for (const d of fields.querySelectorAll("dd")) {
    if (/^[0-9a-f-]{36}$/.test(d.textContent) && d.previousSibling && d.previousSibling.textContent === "batch") {
      const batchId = d.textContent;
      d.replaceChildren(el("a", { href: "#/batches/" + batchId, id: "batch-link" }, batchId));
    }
  }
}

// ------------------------------------------------------------------ live refresh, dark mode

let liveTimer = null;

function setLive(on) {
  localStorage.setItem("ratchet.live", on ? "1" : "0");
  document.getElementById("live-toggle").checked = on;
  clearInterval(liveTimer);
  liveTimer = on ? setInterval(() => {
    // not while the operator types or picks (a checkbox, such as this toggle, is no typing)
    const focused = document.activeElement;
    const busy = focused && ["INPUT", "SELECT", "TEXTAREA"].includes(focused.tagName) && focused.type !== "checkbox";
    const selected = document.querySelector(".select-job:checked");
    if (!busy && !selected && !document.hidden) route();
  }, 5000) : null;
}

function setTheme(theme) {
  localStorage.setItem("ratchet.theme", theme);
  document.documentElement.dataset.theme = theme;
}

function controls() {
  const mode = document.getElementById("mode");
  const live = el("input", { type: "checkbox", id: "live-toggle", onchange: (e) => setLive(e.target.checked) });
  const dark = el("button", { id: "theme-toggle", class: "secondary", title: "dark / light",
    onclick: () => setTheme(document.documentElement.dataset.theme === "dark" ? "light" : "dark") }, "◐");
  mode.before(el("label", { class: "live", title: "refresh this page every 5 s" }, live, " live"), dark);
  const stored = localStorage.getItem("ratchet.theme");
  setTheme(stored || (window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light"));
  setLive(localStorage.getItem("ratchet.live") === "1");
}

window.ratchetRoutes = [
  [/^\/batches$/, (m, params) => batches(params)],
  [/^\/batches\/([^/]+)$/, (m, params) => batch(m[1], params)],
  [/^\/workflow\/([^/]+)$/, (m) => workflow(m[1])],
  [/^\/signals$/, (m, params) => signals(params)],
  [/^\/queues$/, (m, params) => queues(params)],
  [/^\/recurring\/([^/]+)$/, (m) => schedule(decodeURIComponent(m[1]))],
];

window.ratchetAfterRender = (path, params) => {
  if (path === "/jobs") enhanceJobs(params);
  else if (path.startsWith("/jobs/")) enhanceJob(path.slice(6));
  else if (path === "/recurring") enhanceSchedules();
};

controls();
