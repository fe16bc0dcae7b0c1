// skyhive dashboard: plain JavaScript, no build step (docs/dashboard.md).
// Every text from the server goes into the page through textContent or esc(): nothing is parsed as HTML.
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const main = $("#main");

// The token: no cookie carries it (a browser sends a cookie for 127.0.0.1 to every port of 127.0.0.1, so
// any local server would get it). The URL `skyhive dashboard` printed has it in the fragment (never sent
// to a server); this tab keeps it in sessionStorage (this origin's, port included) and sends it in a
// header. `--open` gives a one-time code instead, exchanged here once for the token. (docs/dashboard.md)
const TOKEN_KEY = "skyhive-dashboard-token";
let token = sessionStorage.getItem(TOKEN_KEY) || "";
// (the URL's token, or the code exchanged for one: at the start, and when the address changes to one)
async function takeToken() {
  const query = new URLSearchParams(location.search);
  const frag = location.hash.match(/^#(token|code)=([A-Za-z0-9_-]+)&?(.*)$/);
  let rest = location.hash;
  if (query.get("token")) token = query.get("token");
  if (frag) {
    rest = frag[3] ? "#" + frag[3] : "";
    if (frag[1] === "token") token = frag[2];
    else {
      const resp = await fetch("/api/session", {method: "POST", body: JSON.stringify({code: frag[2]}),
        headers: {"Content-Type": "application/json", "X-Skyhive-Dashboard": "1"}, credentials: "omit"});
      const body = await resp.json().catch(() => ({}));
      if (resp.ok && body.token) token = body.token;
    }
  }
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  if (query.get("token") || frag) history.replaceState(null, "", location.pathname + rest);
}

function noToken() {
  main.innerHTML = `<p class="empty" id="no-token">forbidden: this tab has no token for this dashboard. Open the URL
    <code>skyhive dashboard</code> printed (it carries <code>#token=…</code>).</p>`;
}

function authHeaders(extra = {}) {
  return {"Authorization": `Bearer ${token}`, ...extra};
}

function esc(text) {
  return String(text ?? "").replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
}

async function api(path, options = {}) {
  const init = {credentials: "omit", ...options, headers: authHeaders(options.headers || {})};
  if (init.method && init.method !== "GET") {
    init.headers = {"Content-Type": "application/json", "X-Skyhive-Dashboard": "1", ...init.headers};
  }
  const resp = await fetch(path, init);
  let body = null;
  try { body = await resp.json(); } catch (e) { body = {error: `${resp.status} ${resp.statusText}`}; }
  if (!resp.ok) {
    const err = new Error(body.error || `${resp.status}`);
    err.status = resp.status;
    err.body = body;
    if (resp.status === 403 && !init.method) noToken();
    throw err;
  }
  return body;
}

// A Server-Sent Events stream read through fetch (an EventSource cannot send the token's header):
// `handlers[event](data)` for each event, until the stream ends or `signal` aborts it.
async function stream(path, handlers, signal) {
  const resp = await fetch(path, {headers: authHeaders(), credentials: "omit", signal, cache: "no-store"});
  if (!resp.ok) { const e = new Error(`${resp.status} ${resp.statusText}`); e.status = resp.status; throw e; }
  if (handlers.open) handlers.open();
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return;
    buf += value;
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) event = line.slice(7);
        else if (line.startsWith("data: ")) data.push(line.slice(6));
      }
      if (data.length && handlers[event]) handlers[event](JSON.parse(data.join("\n")));
    }
  }
}

// A download: the browser follows a link itself (no header), so the page asks for a one-time ticket
// for that path first.
async function download(path) {
  try {
    const {ticket} = await api("/api/ticket", {method: "POST", body: JSON.stringify({path})});
    const a = document.createElement("a");
    a.href = `${path}?ticket=${encodeURIComponent(ticket)}`;
    a.download = "";
    document.body.appendChild(a);
    a.click();
    a.remove();
  } catch (e) { toast(e.message, true); }
}

// Change an element's HTML only when it differs (what the user may be pressing stays the same element).
function setHtml(el, html) {
  if (el && el._html !== html) { el.innerHTML = html; el._html = html; }
}

// A table's body patched in place: rows keyed by `key` keep their element while they are listed, and
// only the cells whose HTML changed are rewritten, so a click pressed on a row and released after a live
// update lands on the same element. `rows`: [{key, cls, data: {attr: value}, cells: [[class, html], ...]}]
function patchRows(tbody, rows) {
  const old = new Map(Array.from(tbody.children, tr => [tr.dataset.key, tr]));
  let prev = null;
  for (const r of rows) {
    let tr = old.get(r.key);
    if (tr) old.delete(r.key);
    else { tr = document.createElement("tr"); tr.dataset.key = r.key; }
    for (const [k, v] of Object.entries(r.data || {})) if (tr.dataset[k] !== String(v)) tr.dataset[k] = v;
    if (tr.className !== (r.cls || "")) tr.className = r.cls || "";
    r.cells.forEach(([cls, html], i) => {
      let td = tr.children[i];
      if (!td) { td = document.createElement("td"); tr.appendChild(td); }
      if (td.className !== cls) td.className = cls;
      setHtml(td, html);
    });
    while (tr.children.length > r.cells.length) tr.lastChild.remove();
    const want = prev ? prev.nextSibling : tbody.firstChild;
    if (want !== tr) tbody.insertBefore(tr, want);
    prev = tr;
  }
  for (const tr of old.values()) tr.remove();
}

// A table in `box` (made once, then patched), or `empty` when there are no rows; `foot` below it.
function tableIn(box, id, cls, head, rows, empty, foot = "") {
  if (!rows.length && empty) {
    if (box._shape !== "empty") { box.innerHTML = ""; box._shape = "empty"; }
    setHtml(box, empty);
    return;
  }
  if (box._shape !== id) {
    box.innerHTML = `<table class="${cls}" id="${id}"><thead><tr>${head}</tr></thead><tbody></tbody></table><div class="table-foot"></div>`;
    box._shape = id;
    box._html = undefined;
  }
  patchRows(box.querySelector("tbody"), rows);
  setHtml(box.querySelector(".table-foot"), foot);
}

function fmtTime(ts) {
  if (!ts) return "-";
  const d = new Date(ts * 1000);
  return d.toLocaleString("sv-SE");  // 2026-11-26 18:14:53, in the browser's time zone
}

function fmtDuration(s) {
  if (s === null || s === undefined) return "-";
  if (s < 1) return `${(s * 1000).toFixed(0)} ms`;
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(Math.floor(s % 60)).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor(s / 60 % 60)).padStart(2, "0")}m`;
}

function money(v) {
  if (v === null || v === undefined) return "-";
  return v < 0.01 && v > 0 ? `$${v.toFixed(4)}` : `$${v.toFixed(2)}`;
}

function badge(status) {
  const s = String(status || "");
  let cls = "neutral";
  if (/^(running|ready|UP|SUCCEEDED|ok)/i.test(s)) cls = "good";
  else if (/(gone|DEGRADED|INIT|kept|PENDING|provisioning|connecting|bootstrapping|requested|draining|terminating|starting|cancelled|CANCELLED)/i.test(s)) cls = "warn";
  if (/(fail|error|lost|FAILED|gone)/i.test(s)) cls = "bad";
  if (/^(stopped|terminated|STOPPED)/.test(s)) cls = "neutral";
  return `<span class="badge ${cls}">${esc(s)}</span>`;
}

function toast(text, bad = false) {
  const el = $("#toast");
  el.textContent = text;
  el.className = "toast" + (bad ? " bad" : "");
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => el.className = "toast hidden", 6000);
}

// A confirmation in the page (not window.confirm): says what will happen, the button names the action.
function confirmAction(title, text, action) {
  return new Promise(resolve => {
    $("#modal-title").textContent = title;
    $("#modal-text").textContent = text;
    $("#modal-ok").textContent = action;
    const modal = $("#modal");
    modal.className = "modal";
    const done = answer => {
      modal.className = "modal hidden";
      $("#modal-ok").onclick = $("#modal-cancel").onclick = null;
      resolve(answer);
    };
    $("#modal-ok").onclick = () => done(true);
    $("#modal-cancel").onclick = () => done(false);
  });
}

function problemsHtml(problems) {
  if (!problems || !problems.length) return "";
  return `<div class="problems">${problems.map(p => `
    <div class="problem"><div class="cause">${esc(p.cause)}</div>
    ${p.fix ? `<div class="fix">fix: <code>${esc(p.fix)}</code> <button class="btn small copy" data-copy="${esc(p.fix)}">copy</button></div>` : ""}</div>`).join("")}</div>`;
}

document.addEventListener("click", ev => {
  const copy = ev.target.closest("[data-copy]");
  if (copy) {
    navigator.clipboard?.writeText(copy.dataset.copy).then(() => toast(`copied: ${copy.dataset.copy}`), () => {});
  }
});

// ---- actions -----------------------------------------------------------------------------------------

async function downPool(pool, named) {
  const what = named ? `Stop named pool ${pool}: its agent, watchdog and workers (and what their jobs started), and forget it — as \`skyhive down ${pool}\`.`
                     : `Destroy what pool ${pool}'s provider still holds, kill its leftover processes and record it stopped — as \`skyhive down ${pool}\`.`;
  if (!await confirmAction(`Take pool ${pool} down?`, what, "Down pool")) return;
  try {
    const r = await api(`/api/pools/${encodeURIComponent(pool)}/down`, {method: "POST", body: "{}"});
    toast(r.message);
  } catch (e) {
    if (e.body && e.body.force) {
      if (await confirmAction("Its client still runs", `${e.message}. Take it down anyway (as \`skyhive down --force ${pool}\`)?`, "Force down")) {
        try {
          const r = await api(`/api/pools/${encodeURIComponent(pool)}/down`, {method: "POST", body: JSON.stringify({force: true})});
          toast(r.message);
        } catch (e2) { toast(e2.message, true); }
      }
    } else {
      toast(e.message, true);
    }
  }
  refresh();
}

async function cancelJob(name, job) {
  if (!await confirmAction(`Cancel job ${job} of ${name}?`, `A pending job is cancelled at once; a running one has its nodes' commands stopped — as \`skyhive cancel ${name} ${job}\`.`, "Cancel job")) return;
  try {
    const r = await api(`/api/named/${encodeURIComponent(name)}/jobs/${job}/cancel`, {method: "POST", body: "{}"});
    toast(r.message);
  } catch (e) { toast(e.message, true); }
  refresh();
}

async function cancelManaged(job) {
  if (!await confirmAction(`Cancel managed job ${job}?`, `Its controller stops its pool and records it cancelled; no recovery follows — as \`skyhive jobs cancel ${job}\`.`, "Cancel job")) return;
  try {
    const r = await api(`/api/managed/${job}/cancel`, {method: "POST", body: "{}"});
    toast(r.message);
  } catch (e) { toast(e.message, true); }
  refresh();
}

document.addEventListener("click", ev => {
  const managed = ev.target.closest("[data-cancel-managed]");
  if (managed) { ev.preventDefault(); cancelManaged(managed.dataset.cancelManaged); }
  const down = ev.target.closest("[data-down]");
  if (down) { ev.preventDefault(); downPool(down.dataset.down, down.dataset.named === "1"); }
  const cancel = ev.target.closest("[data-cancel-job]");
  if (cancel) { ev.preventDefault(); cancelJob(cancel.dataset.pool, cancel.dataset.cancelJob); }
});

// ---- pages -------------------------------------------------------------------------------------------

let view = null; // {name, refresh(), leave()}

async function poolsPage() {
  const me = view;
  const [{pools}, {named}] = await Promise.all([api("/api/pools"), api("/api/named")]);
  if (view !== me) return;  // the user went elsewhere meanwhile: this page is not shown any more
  const running = pools.filter(p => p.status !== "stopped");
  const rows = pools.map(p => ({key: p.pool, cls: p.status === "stopped" ? "dim" : "", data: {pool: p.pool}, cells: [
    ["", `<a href="#/pool/${encodeURIComponent(p.pool)}">${esc(p.pool)}</a>${p.named ? ' <span class="tag">named</span>' : ""}`],
    ["", badge(p.status)],
    ["", esc(p.provider)],
    ["num", String(p.nodes)],
    ["num good-text", String(p.ready)],
    [`num ${p.failed ? "bad-text" : ""}`, String(p.failed)],
    ["", esc(p.machine)],
    ["num", p.per_hour === null ? "-" : money(p.per_hour) + "/h"],
    ["num", money(p.spent)],
    ["num", esc(p.age)],
    ["", esc(p.autostop)],
    ["", p.problems.length ? `<span class="bad-text" title="${esc(p.problems.map(x => x.cause).join("\n"))}">${p.problems.length} problem${p.problems.length > 1 ? "s" : ""}</span>` : ""],
    ["", p.can_down ? `<button class="btn small danger" data-down="${esc(p.pool)}" data-named="${p.named ? 1 : 0}">down</button>` : ""],
  ]}));
  const spent = pools.reduce((a, p) => a + (p.spent || 0), 0);
  const perHour = running.reduce((a, p) => a + (p.per_hour || 0), 0);
  if (!$("#pools-page")) {
    main.innerHTML = `<div id="pools-page"><section class="cards" id="pools-cards"></section><h1>Pools</h1>
      <div id="pools-problems"></div><div id="pools-box"></div></div>`;
  }
  setHtml($("#pools-cards"), `
      <div class="card"><div class="label">Pools running</div><div class="value">${running.length}</div></div>
      <div class="card"><div class="label">Nodes up</div><div class="value">${running.reduce((a, p) => a + p.ready, 0)}</div></div>
      <div class="card"><div class="label">Failed nodes</div><div class="value ${running.some(p => p.failed) ? "bad-text" : ""}">${pools.reduce((a, p) => a + p.failed, 0)}</div></div>
      <div class="card"><div class="label">Burning</div><div class="value">${money(perHour)}/h</div></div>
      <div class="card"><div class="label">Spent (all pools)</div><div class="value">${money(spent)}</div></div>
      <div class="card"><div class="label">Named pools</div><div class="value">${named.length}</div></div>`);
  setHtml($("#pools-problems"), problemsHtml(running.flatMap(p => p.problems.filter(x => /gone|failed/.test(x.cause)).slice(0, 3))));
  tableIn($("#pools-box"), "pools", "grid", `<th>Pool</th><th>Status</th><th>Provider</th><th class="num">Nodes</th><th class="num">Ready</th>
      <th class="num">Failed</th><th>Machine</th><th class="num">$/h</th><th class="num">Cost so far</th><th class="num">Age</th>
      <th>Autostop</th><th>Problems</th><th></th>`, rows,
    `<p class="empty">No pools yet. Start one with <code>skyhive launch task.yaml</code> or <code>sky.Pool(...)</code> in Python.</p>`);
}

function nodesTable(box, data) {
  const rows = data.nodes.map(n => ({key: String(n.node), cls: n.state === "failed" ? "failed-row" : "", data: {node: n.node}, cells: [
    ["num", String(n.node)], ["", badge(n.state)], ["", esc(n.provider_state || "-")],
    ["", `<code>${esc(n.addr || "-")}</code>`], ["", `<code>${esc(n.provider_id || "-")}</code>`],
    ["", n.workers.map(w => `<span class="worker ${esc(w.state)}" title="worker ${w.rank}: ${esc(w.state)}, pid ${w.pid}, ${w.restarts} restarts">${w.rank}:${esc(w.state)}${w.restarts ? ` ↻${w.restarts}` : ""}</span>`).join(" ") || "-"],
    ["detail", `${esc(n.dropped ? `left out: ${n.dropped}` : n.detail)}${n.replacements ? ` <span class="tag">replaced ×${n.replacements}</span>` : ""}`],
  ]}));
  const pager = data.total > data.nodes.length ? `<div class="pager">nodes ${data.offset}–${data.offset + data.nodes.length - 1} of ${data.total}
      <button class="btn small" data-page="-1" ${data.offset === 0 ? "disabled" : ""}>◀</button>
      <button class="btn small" data-page="1" ${data.offset + data.nodes.length >= data.total ? "disabled" : ""}>▶</button></div>` : "";
  tableIn(box, "nodes", "grid", `<th class="num">Node</th><th>Lifecycle</th><th>Provider state</th><th>Address</th>
    <th>Provider id</th><th>Workers</th><th>Detail</th>`, rows, null, pager);
}

function eventsTable(box, data) {
  const rows = data.events.map(e => {
    const rest = Object.entries(e).filter(([k]) => !["seq", "ts", "type", "node"].includes(k))
      .map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : v}`).join("  ");
    return {key: String(e.seq), cls: `ev-${e.type}`, cells: [["num", String(e.seq)], ["", esc(fmtTime(e.ts))], ["", esc(e.type)],
      ["num", String(e.node ?? "")], ["detail", esc(rest)]]};
  });
  tableIn(box, "events", "grid compact", `<th class="num">Seq</th><th>Time</th><th>Type</th><th class="num">Node</th><th>What</th>`, rows, null,
    data.more ? `<p class="muted">showing the newest ${data.events.length}; narrow the filter to see more</p>` : "");
}

function jobsTable(box, pool, jobs) {
  const rows = (jobs || []).slice().reverse().map(j => ({key: String(j.id), data: {job: j.id}, cells: [
    ["num", String(j.id)], ["", esc(j.name)], ["", badge(j.state)], ["", esc(fmtTime(j.started))],
    ["", fmtDuration(j.duration)], ["num", String(j.exit_code ?? "")], ["detail", esc(j.detail)],
    ["", `<a class="btn small" href="#/log/named/${encodeURIComponent(pool)}/${j.id}">log</a>
    ${j.finished ? "" : `<button class="btn small danger" data-cancel-job="${j.id}" data-pool="${esc(pool)}">cancel</button>`}`],
  ]}));
  tableIn(box, "jobs", "grid", `<th class="num">Job</th><th>Name</th><th>State</th><th>Started</th><th>Duration</th>
    <th class="num">Exit</th><th>Detail</th><th></th>`, rows, `<p class="muted">No jobs.</p>`);
}

function tasksTable(box, tasks) {
  const rows = tasks.map(t => ({key: String(t.task), cells: [
    ["num", String(t.task)], ["", `<code>${esc(t.fn)}</code>${t.items > 1 ? ` ×${t.items}` : ""}`], ["num", String(t.node)],
    ["num", String(t.rank)], ["", esc(fmtTime(t.submitted))], ["", badge(t.outcome)], ["", fmtDuration(t.seconds)],
    ["detail", esc(t.error)],
  ]}));
  tableIn(box, "tasks", "grid compact", `<th class="num">Task</th><th>Function</th><th class="num">Node</th><th class="num">Worker</th>
    <th>Submitted</th><th>Outcome</th><th>Took</th><th>Error</th>`, rows, `<p class="muted">No tasks.</p>`);
}

async function poolPage(pool) {
  const enc = encodeURIComponent(pool);
  const st = view.state || (view.state = {nodeState: "", nodeOffset: 0, evType: "", evNode: "", timelineAt: 0});
  const nodeQ = `state=${encodeURIComponent(st.nodeState)}&offset=${st.nodeOffset}&limit=100`;
  const evQ = `type=${encodeURIComponent(st.evType)}&node=${encodeURIComponent(st.evNode)}&limit=200`;
  const me = view;
  const [p, nodes, events] = await Promise.all([api(`/api/pools/${enc}`), api(`/api/pools/${enc}/nodes?${nodeQ}`),
                                                api(`/api/pools/${enc}/events?${evQ}`)]);
  if (view !== me) return;  // the user went elsewhere meanwhile
  const first = !$("#pool-page") || $("#pool-page").dataset.pool !== pool;
  if (first) {
    main.innerHTML = `<div id="pool-page" data-pool="${esc(pool)}">
      <div class="title-row"><h1><a href="#/">Pools</a> / <span id="pool-name"></span></h1><span id="pool-status"></span>
        <span class="spacer"></span><a class="btn" id="log-link" href="#/log/pool/${enc}">Output log</a><span id="down-slot"></span></div>
      <section class="cards" id="pool-cards"></section>
      <div id="pool-problems"></div>
      <h2>Timeline <span class="muted small">wheel: zoom · drag: pan · double-click: reset · click a lane: its events</span></h2>
      <div id="timeline" class="timeline"></div>
      <h2>Nodes <select id="node-state"><option value="">every state</option></select></h2>
      <div id="nodes-box"></div>
      <div id="jobs-section"></div>
      <h2>Tasks <span class="muted small" id="task-counts"></span></h2>
      <div id="tasks-box"></div>
      <h2>Events <select id="ev-type"><option value="">every type</option></select>
        <input id="ev-node" type="number" min="0" placeholder="node" value=""> <button class="btn small" id="ev-clear">clear</button></h2>
      <div id="events-box"></div></div>`;
    $("#pool-name").textContent = pool;
    $("#node-state").onchange = e => { st.nodeState = e.target.value; st.nodeOffset = 0; refresh(); };
    $("#ev-type").onchange = e => { st.evType = e.target.value; refresh(); };
    $("#ev-node").onchange = e => { st.evNode = e.target.value; refresh(); };
    $("#ev-clear").onclick = () => { st.evType = st.evNode = ""; $("#ev-type").value = ""; $("#ev-node").value = ""; refresh(); };
    $("#nodes-box").onclick = e => {
      const b = e.target.closest("[data-page]");
      if (b) { st.nodeOffset = Math.max(0, st.nodeOffset + Number(b.dataset.page) * 100); refresh(); }
    };
    st.timelineAt = 0;
  }
  setHtml($("#pool-status"), badge(p.status));
  setHtml($("#down-slot"), p.can_down ? `<button class="btn danger" data-down="${esc(pool)}" data-named="${p.named ? 1 : 0}">Down pool</button>` : "");
  setHtml($("#pool-cards"), `
    <div class="card"><div class="label">Provider</div><div class="value small-value">${esc(p.provider)}</div></div>
    <div class="card"><div class="label">Nodes ready / failed</div><div class="value"><span class="good-text">${p.ready}</span> / <span class="${p.failed ? "bad-text" : ""}">${p.failed}</span> <span class="muted small">of ${p.nodes}</span></div></div>
    <div class="card"><div class="label">Machine</div><div class="value small-value">${esc(p.machine)}</div></div>
    <div class="card"><div class="label">Cost</div><div class="value small-value">${p.per_hour === null ? "-" : money(p.per_hour) + "/h · " + money(p.spent)}</div></div>
    <div class="card"><div class="label">Age</div><div class="value small-value">${esc(p.age)}</div><div class="muted small">${esc(fmtTime(p.started))}</div></div>
    <div class="card"><div class="label">Autostop</div><div class="value small-value">${esc(p.autostop)}</div></div>
    <div class="card"><div class="label">Client</div><div class="value small-value">${p.client_pid ? `pid ${p.client_pid}` : "-"}</div><div class="muted small">${esc(p.host)}</div></div>`);
  setHtml($("#pool-problems"), problemsHtml(p.problems) +
    (p.ended && !p.problems.length ? `<div class="note">stopped: ${esc(p.ended)}</div>` : ""));
  const sel = $("#node-state");
  const states = Object.keys(p.states);
  setHtml(sel, `<option value="">every state (${p.nodes})</option>` + states.map(s => `<option value="${esc(s)}">${esc(s)} (${p.states[s]})</option>`).join(""));
  sel.value = st.nodeState;
  nodesTable($("#nodes-box"), nodes);
  const evSel = $("#ev-type");
  setHtml(evSel, `<option value="">every type</option>` + Object.entries(p.event_types).map(([t, n]) => `<option value="${esc(t)}">${esc(t)} (${n})</option>`).join(""));
  evSel.value = st.evType;
  eventsTable($("#events-box"), events);
  setHtml($("#jobs-section"), p.named ? `<h2>Jobs</h2><div id="jobs-box"></div>` : "");
  if (p.named) jobsTable($("#jobs-box"), pool, p.jobs);
  const t = p.tasks;
  $("#task-counts").textContent = `${t.submitted} submitted · ${t.ok} ok · ${t.failed} failed · ${t.cancelled} cancelled · ${t.lost} lost · ${t.in_flight} running`;
  tasksTable($("#tasks-box"), p.recent_tasks);
  // the timeline is redrawn at most every 2 s while the pool changes (a big pool's is the costly part)
  const now = Date.now();
  if (!(now - st.timelineAt > 2000 || first)) {  // drawn less than 2 s ago: once more when they are up
    if (!st.timelineLater) st.timelineLater = setTimeout(() => { st.timelineLater = null; refresh(); }, 2100 - (now - st.timelineAt));
  } else {
    st.timelineAt = now;
    const tl = await api(`/api/pools/${enc}/timeline`);
    if (view !== me) return;
    drawTimeline($("#timeline"), tl, node => {
      st.evNode = String(node); $("#ev-node").value = st.evNode; refresh();
      $("#events-box").scrollIntoView();
    });
  }
}

async function namedPage() {
  const me = view;
  const {named} = await api("/api/named");
  if (view !== me) return;
  if (!$("#named-page")) main.innerHTML = `<div id="named-page"><h1>Named pools</h1><div id="named-list"></div></div>`;
  const list = $("#named-list");
  if (!named.length) {
    setHtml(list, `<p class="empty">No named pools. <code>skyhive launch -c NAME task.yaml</code> creates one.</p>`);
    return;
  }
  if (list.querySelector(".empty")) { list.innerHTML = ""; list._html = undefined; }
  // a section per pool, kept while the pool is listed (its parts patched as a table's rows are)
  const old = new Map(Array.from(list.children, el => [el.dataset.named, el]));
  let prev = null;
  for (const n of named) {
    let sec = old.get(n.name);
    if (sec) old.delete(n.name);
    else {
      sec = document.createElement("section");
      sec.className = "named";
      sec.dataset.named = n.name;
      sec.innerHTML = `<div class="named-head"></div><div class="named-fix"></div><div class="named-jobs"></div>`;
    }
    setHtml(sec.querySelector(".named-head"), `<div class="title-row"><h2><a href="#/pool/${encodeURIComponent(n.name)}">${esc(n.name)}</a></h2>${badge(n.state)}
      <span class="muted">${esc(n.provider)} · ${n.nodes} nodes · ${n.live_workers ?? "?"}/${n.workers} workers live · autostop ${esc(n.autostop)} · ${n.running} running, ${n.pending} pending</span>
      <span class="spacer"></span><button class="btn small danger" data-down="${esc(n.name)}" data-named="1">down</button></div>`);
    setHtml(sec.querySelector(".named-fix"), n.fix ? problemsHtml([{cause: `pool ${n.name} is ${n.state}`, fix: n.fix}]) : "");
    jobsTable(sec.querySelector(".named-jobs"), n.name, n.jobs);
    const want = prev ? prev.nextSibling : list.firstChild;
    if (want !== sec) list.insertBefore(sec, want);
    prev = sec;
  }
  for (const el of old.values()) el.remove();
}

async function managedPage() {
  const me = view;
  const {jobs} = await api("/api/managed");
  if (view !== me) return;
  if (!$("#managed-page")) main.innerHTML = `<div id="managed-page"><h1>Managed jobs</h1><div id="managed-box"></div></div>`;
  const rows = jobs.map(j => ({key: String(j.id), data: {managed: j.id}, cells: [
    ["num", String(j.id)], ["", esc(j.name)], ["", badge(j.state)], ["num", String(j.attempts)],
    ["num", String(j.recoveries)], ["", esc(j.restarts)], ["", esc(j.age)], ["", fmtDuration(j.duration)],
    ["detail", esc(j.detail)],
    ["", `<a class="btn small" href="#/log/managed/${j.id}">log</a>
    ${j.finished ? "" : `<button class="btn small danger" data-cancel-managed="${j.id}">cancel</button>`}`],
  ]}));
  tableIn($("#managed-box"), "managed", "grid", `<th class="num">Job</th><th>Name</th>
    <th>State</th><th class="num">Attempts</th><th class="num">Recoveries</th><th>Restarts on errors</th><th>Age</th><th>Running for</th>
    <th>Detail</th><th></th>`, rows, `<p class="empty">No managed jobs. <code>skyhive jobs launch task.yaml</code> starts one.</p>`);
}

// ---- the log page --------------------------------------------------------------------------------------

// Lines a log page holds while it follows a log (the oldest parts are let go past it; "load earlier"
// brings them back).
const MAX_LOG_LINES = 50000;

function fmtBytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1 << 20) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1 << 30) return `${(n / (1 << 20)).toFixed(1)} MiB`;
  return `${(n / (1 << 30)).toFixed(2)} GiB`;
}

// A log page: the end of the log first, then what it gains as it is written (a live stream read on from
// where the end stopped); earlier parts are loaded on demand ("load earlier": a pool's output by line
// numbers, a job's log by byte ranges). Download saves every byte (a one-time ticket, then a link).
function logPage(kind, a, b) {
  const title = kind === "pool" ? `pool ${a}` : kind === "managed" ? `managed job ${a}` : `${a} · job ${b}`;
  const enc = encodeURIComponent;
  const base = kind === "pool" ? `/api/pools/${enc(a)}/output` : kind === "managed" ? `/api/managed/${enc(a)}/log`
                                                              : `/api/named/${enc(a)}/jobs/${b}/log`;
  const back = kind === "managed" ? "#/managed" : `#/pool/${enc(a)}`;
  const heading = kind === "managed" ? ["managed jobs", `job ${a}`] : [a, kind === "pool" ? "output" : `job ${b}`];
  main.innerHTML = `<div class="title-row"><h1><a href="${back}">${esc(heading[0])}</a> / ${esc(heading[1])}</h1>
      <span id="log-state"></span><span class="spacer"></span>
      <input id="log-search" type="search" placeholder="search (text or /regex/)">
      <label class="check"><input id="log-follow" type="checkbox" checked> follow</label>
      <button class="btn" id="log-download">Download</button>
      ${kind !== "pool" ? `<span id="job-cancel"></span>` : ""}</div>
    <div class="muted small"><span id="log-info">loading the end of the log…</span>
      <button class="btn small hidden" id="log-earlier">load earlier</button></div>
    <pre id="log" class="log"></pre>`;
  document.title = `skyhive · ${title}`;
  $("#log-download").onclick = () => download(`${base}/download`);
  const pre = $("#log");
  const lines = [];    // the lines loaded, oldest first
  const chunks = [];   // the parts they came in, [{start, count}]: let go of from the front whole
  let partial = "";    // the start of a line whose end has not come yet
  let startPos = 0;    // where lines[0] begins: a byte offset (a pool: a line number)
  let pos = 0;         // where the live stream reads on from (a pool: the last line number it had)
  let earlier = false; // something before lines[0] can be loaded
  let held = 0;        // a pool: the oldest line the dashboard holds (the download has those before)
  let ended = false;
  const ctl = new AbortController();
  const matcher = () => {
    const q = $("#log-search").value;
    if (!q) return null;
    const m = q.match(/^\/(.+)\/([a-z]*)$/);
    try { return m ? new RegExp(m[1], m[2].includes("i") ? "i" : "") : {test: s => s.toLowerCase().includes(q.toLowerCase())}; }
    catch (e) { return {test: () => false}; }
  };
  // a line as HTML: its node prefix coloured, what the search matches marked
  const lineHtml = line => {
    const m = line.match(/^(\[node (\d+)\] )(.*)$/s);
    const [prefix, rest] = m ? [m[1], m[3]] : ["", line];
    const head = prefix ? `<span class="node-prefix n${Number(m[2]) % 8}">${esc(prefix)}</span>` : "";
    // skyhive's own lines in a job's log (a recovery, a restart, the end) are marked
    if (!prefix && rest.startsWith("[skyhive] ")) return `<span class="skyhive-note">${highlight(rest)}</span>\n`;
    return head + highlight(rest) + "\n";
  };
  const highlight = text => {
    const q = $("#log-search").value;
    const re = matcher();
    if (!q || !re) return esc(text);
    const global = re instanceof RegExp ? new RegExp(re.source, re.flags + "g")
                                        : new RegExp(q.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"), "gi");
    let out = "", last = 0;
    for (const hit of text.matchAll(global)) {
      if (!hit[0]) break;
      out += esc(text.slice(last, hit.index)) + `<mark>${esc(hit[0])}</mark>`;
      last = hit.index + hit[0].length;
    }
    return out + esc(text.slice(last));
  };
  const info = () => {
    const m = matcher();
    let text = m ? `${lines.filter(l => m.test(l)).length} of ${lines.length} lines match` : `${lines.length} lines`;
    if (earlier) text += kind === "pool" ? ` · the end of the output: the ${startPos} lines before it are not shown`
                                         : ` · the end of the log: the ${fmtBytes(startPos)} before it are not shown`;
    if (kind === "pool" && held > 0 && startPos <= held) {
      text += ` · the dashboard holds the last ${MAX_LOG_LINES.toLocaleString("en")} lines of a pool's output: the ${held} before them are in Download`;
    }
    $("#log-info").textContent = text;
    $("#log-earlier").classList.toggle("hidden", !earlier);
  };
  const follow = () => {
    if ($("#log-follow").checked) { pre.dataset.auto = "1"; pre.scrollTop = pre.scrollHeight; setTimeout(() => pre.dataset.auto = "", 50); }
  };
  const render = () => {
    const m = matcher();
    pre.innerHTML = (m ? lines.filter(l => m.test(l)) : lines).map(lineHtml).join("");
    info();
    follow();
  };
  const append = (text, start) => {
    const parts = (partial + text).split("\n");
    partial = parts.pop();
    if (!parts.length) return;
    chunks.push({start, count: parts.length});
    const m = matcher();
    let html = "";
    for (const line of parts) {
      lines.push(line);
      if (!m || m.test(line)) html += lineHtml(line);
    }
    if (lines.length > MAX_LOG_LINES && chunks.length > 1) {
      while (lines.length > MAX_LOG_LINES && chunks.length > 1) lines.splice(0, chunks.shift().count);
      startPos = chunks[0].start;
      earlier = true;
      render();
      return;
    }
    pre.insertAdjacentHTML("beforeend", html);
    info();
    follow();
  };
  $("#log-earlier").onclick = async () => {
    try {
      const part = await api(`${base}?before=${startPos}`);
      const parts = part.text.split("\n");
      if (parts[parts.length - 1] === "") parts.pop();
      if (parts.length) { chunks.unshift({start: part.start, count: parts.length}); lines.splice(0, 0, ...parts); }
      startPos = part.start;
      earlier = kind === "pool" ? part.start > part.first : part.start > 0;
      if (kind === "pool") held = part.first;
      $("#log-follow").checked = false;
      const height = pre.scrollHeight, top = pre.scrollTop;
      render();
      pre.dataset.auto = "1";
      pre.scrollTop = top + pre.scrollHeight - height;  // what was in view stays in view
      setTimeout(() => pre.dataset.auto = "", 50);
    } catch (e) { toast(e.message, true); }
  };
  $("#log-search").oninput = render;
  $("#log-follow").onchange = () => { if ($("#log-follow").checked) pre.scrollTop = pre.scrollHeight; };
  pre.onscroll = () => {
    const atEnd = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 8;
    if (!atEnd && $("#log-follow").checked && pre.dataset.auto !== "1") $("#log-follow").checked = false;
  };
  const finish = () => {
    if (partial) { lines.push(partial); pre.insertAdjacentHTML("beforeend", lineHtml(partial)); partial = ""; info(); follow(); }
    $("#log-state").innerHTML = badge("ended");
    jobState();
  };
  const live = async () => {
    while (!ended && !ctl.signal.aborted) {
      const url = kind === "pool" ? `/api/live/log?pool=${enc(a)}&after=${pos}`
                : kind === "managed" ? `/api/live/log?managed=${enc(a)}&offset=${pos}`
                                     : `/api/live/log?named=${enc(a)}&job=${b}&offset=${pos}`;
      try {
        await stream(url, {
          lines: d => { const at = kind === "pool" ? pos + 1 : pos; pos = d.next; append(d.text, at); },
          end: () => { ended = true; },
        }, ctl.signal);
      } catch (e) {
        if (ctl.signal.aborted) return;
        if (e.status === 403) { noToken(); return; }
        if (e.status) { $("#log-state").innerHTML = badge("error: " + e.message); return; }
      }
      if (ended) { finish(); return; }
      if (!ctl.signal.aborted) {  // the stream broke off (the dashboard restarted?): on from where it was
        $("#log-state").innerHTML = badge("disconnected");
        await new Promise(r => setTimeout(r, 1000));
      }
    }
  };
  const jobState = async () => {
    if (kind === "pool") return;
    if (kind === "managed") {
      try {
        const {job} = await api(`/api/managed/${encodeURIComponent(a)}`);
        $("#log-state").innerHTML = badge(job.state) + ` <span class="muted">attempts ${job.attempts} · recoveries ${job.recoveries}</span>`;
        $("#job-cancel").innerHTML = job.finished ? "" : `<button class="btn danger" data-cancel-managed="${esc(a)}">Cancel job</button>`;
      } catch (e) { $("#log-state").innerHTML = badge("error: " + e.message); }
      return;
    }
    try {
      const {job} = await api(`/api/named/${encodeURIComponent(a)}/jobs/${b}`);
      $("#log-state").innerHTML = badge(job.state) + (job.exit_code !== null ? ` <span class="muted">exit ${job.exit_code}</span>` : "");
      $("#job-cancel").innerHTML = job.finished ? "" : `<button class="btn danger" data-cancel-job="${b}" data-pool="${esc(a)}">Cancel job</button>`;
    } catch (e) { $("#log-state").innerHTML = badge("error: " + e.message); }
  };
  (async () => {
    try {
      const part = await api(`${base}?before=-1`);
      if (ctl.signal.aborted) return;
      startPos = part.start;
      pos = part.next;
      earlier = kind === "pool" ? part.start > part.first : part.start > 0;
      if (kind === "pool") held = part.first;
      append(part.text, part.start);
      info();
      live();
    } catch (e) {
      if (!ctl.signal.aborted) $("#log-info").textContent = `the log could not be read: ${e.message}`;
    }
  })();
  jobState();
  return {leave: () => ctl.abort(), refresh: jobState};
}

// ---- the timeline: SVG drawn from events/timeline.py's lanes and spans ------------------------------------

function drawTimeline(box, tl, onLane) {
  const keep = box._zoom && box._pool === tl.pool ? box._zoom : null;
  box._pool = tl.pool;
  const width = Math.max(600, box.clientWidth || 1000);
  const left = 170, right = 16, top = 26;
  const laneH = lane => lane.tasks ? 12 : 20;
  let y = top;
  const ys = tl.lanes.map(lane => { const at = y; y += laneH(lane) + (lane.tasks ? 6 : 3); return at; });
  const height = y + 8;
  const duration = Math.max(tl.duration, 1e-3);
  let [t0, t1] = keep || [0, duration];
  const svgNS = "http://www.w3.org/2000/svg";
  box.innerHTML = "";
  if (!tl.lanes.length) { box.innerHTML = `<p class="muted">No nodes yet.</p>`; return; }
  const head = document.createElement("div");
  head.className = "tl-head";
  head.innerHTML = `<span>${tl.nodes} nodes${tl.group_size > 1 ? `, lanes of ${tl.group_size} nodes each` : ""} · ${fmtDuration(tl.duration)}${tl.stopped ? " · stopped" : " · live"}</span>
    <span class="legend">${Object.entries(tl.colors).map(([k, c]) => `<span><i style="background:${esc(c)}"></i>${esc(k)}</span>`).join("")}</span>`;
  box.appendChild(head);
  const svg = document.createElementNS(svgNS, "svg");
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("class", "tl-svg");
  box.appendChild(svg);
  const tip = $("#tip");
  function draw() {
    const scale = (width - left - right) / (t1 - t0);
    const x = t => left + (t - t0) * scale;
    const parts = [];
    // axis
    const step = niceStep((t1 - t0) / 8);
    for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
      parts.push(`<line x1="${x(t)}" x2="${x(t)}" y1="${top - 4}" y2="${height}" class="grid-line"/>`);
      parts.push(`<text x="${x(t) + 2}" y="${top - 8}" class="axis">${esc(fmtDuration(t))}</text>`);
    }
    tl.lanes.forEach((lane, i) => {
      const h = laneH(lane), yy = ys[i];
      parts.push(`<text x="${lane.tasks ? 18 : 6}" y="${yy + h - 5}" class="lane-label${lane.tasks ? " task-label" : ""}" data-lane="${i}">${esc(lane.title)}</text>`);
      for (let j = 0; j < lane.spans.length; j++) {
        const [s, e, kind] = lane.spans[j];
        if (e < t0 || s > t1 + 1e-6) continue;  // (a state entered as the log ends is drawn, 1 px wide)
        const xs = Math.max(left, x(s)), xe = Math.min(width - right, x(e));
        parts.push(`<rect x="${xs}" y="${yy}" width="${Math.max(1, xe - xs)}" height="${h}" fill="${esc(tl.colors[kind] || "#999")}" data-lane="${i}" data-span="${j}"/>`);
      }
      for (let j = 0; j < lane.marks.length; j++) {
        const [t] = lane.marks[j];
        if (t < t0 || t > t1) continue;
        parts.push(`<path d="M${x(t)},${yy - 2} l4,-5 l-8,0 z" class="mark" data-lane="${i}" data-mark="${j}"/>`);
      }
    });
    svg.innerHTML = parts.join("");
  }
  draw();  // (box._zoom is set only by the user's zoom or pan: untouched, the view follows the pool's life)
  const timeAt = px => t0 + (px - left) / ((width - left - right) / (t1 - t0));
  svg.onwheel = ev => {
    ev.preventDefault();
    const rect = svg.getBoundingClientRect();
    const t = timeAt(ev.clientX - rect.left);
    const f = ev.deltaY > 0 ? 1.25 : 0.8;
    const nt0 = Math.max(0, t - (t - t0) * f), nt1 = Math.min(duration, t + (t1 - t) * f);
    if (nt1 - nt0 < 1e-3) return;
    t0 = nt0; t1 = nt1; box._zoom = [t0, t1]; draw();
  };
  let drag = null;
  svg.onmousedown = ev => { drag = {x: ev.clientX, t0, t1, moved: false}; };
  svg.onmouseup = () => { setTimeout(() => { drag = null; }, 0); };
  svg.onmousemove = ev => {
    if (drag && ev.buttons) {
      const dt = (ev.clientX - drag.x) / ((width - left - right) / (drag.t1 - drag.t0));
      if (Math.abs(ev.clientX - drag.x) > 3) drag.moved = true;
      let nt0 = drag.t0 - dt, nt1 = drag.t1 - dt;
      if (nt0 < 0) { nt1 -= nt0; nt0 = 0; }
      if (nt1 > duration) { nt0 -= nt1 - duration; nt1 = duration; }
      t0 = Math.max(0, nt0); t1 = nt1; box._zoom = [t0, t1]; draw();
      return;
    }
    const el = ev.target;
    const i = el.dataset && el.dataset.lane;
    if (i === undefined) { tip.className = "tip hidden"; return; }
    const lane = tl.lanes[Number(i)];
    let text;
    if (el.dataset.span !== undefined) {
      const [s, e, kind, label] = lane.spans[Number(el.dataset.span)];
      text = `${lane.title}\n${kind}${label ? ": " + label : ""}\n${fmtDuration(s)} → ${fmtDuration(e)} (${fmtDuration(e - s)})`;
    } else if (el.dataset.mark !== undefined) {
      const [t, what] = lane.marks[Number(el.dataset.mark)];
      text = `${lane.title} at ${fmtDuration(t)}\n${what}`;
    } else {
      text = `${lane.title}: click for its events`;
    }
    tip.textContent = text;
    tip.className = "tip";
    tip.style.left = `${ev.clientX + 12}px`;
    tip.style.top = `${ev.clientY + 12}px`;
  };
  svg.onmouseleave = () => { tip.className = "tip hidden"; };
  svg.ondblclick = () => { t0 = 0; t1 = duration; box._zoom = null; draw(); };
  svg.onclick = ev => {
    if (drag && drag.moved) return;
    const i = ev.target.dataset && ev.target.dataset.lane;
    if (i !== undefined && onLane) onLane(tl.lanes[Number(i)].node);
  };
}

function niceStep(raw) {
  const steps = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 43200, 86400];
  return steps.find(s => s >= raw) || 86400 * Math.ceil(raw / 86400);
}

// ---- routing and live updates -----------------------------------------------------------------------------

async function route() {
  if (view && view.leave) view.leave();
  const hash = location.hash.replace(/^#/, "") || "/";
  const parts = hash.split("/").filter(Boolean).map(decodeURIComponent);
  document.querySelectorAll("[data-nav]").forEach(a => a.classList.toggle("active",
    (a.dataset.nav === "named" && parts[0] === "named") || (a.dataset.nav === "managed" && parts[0] === "managed")
    || (a.dataset.nav === "pools" && !["named", "managed"].includes(parts[0]))));
  document.title = "skyhive dashboard";
  if (parts[0] === "pool" && parts[1]) view = {name: "pool", refresh: () => poolPage(parts[1])};
  else if (parts[0] === "named") view = {name: "named", refresh: namedPage};
  else if (parts[0] === "managed") view = {name: "managed", refresh: managedPage};
  else if (parts[0] === "log" && parts[1] === "managed") view = {name: "log", ...logPage("managed", parts[2])};
  else if (parts[0] === "log" && parts[1] === "pool") view = {name: "log", ...logPage("pool", parts[2])};
  else if (parts[0] === "log" && parts[1] === "named") view = {name: "log", ...logPage("named", parts[2], parts[3])};
  else view = {name: "pools", refresh: poolsPage};
  await refresh();
}

let refreshing = null, again = false;
async function refresh() {
  if (!view || !view.refresh) return;
  if (refreshing) { again = true; return refreshing; }
  refreshing = (async () => {
    try { await view.refresh(); }
    catch (e) {
      if (e.status === 404 && view.name === "pool") main.innerHTML = `<p class="empty">${esc(e.message)} — <a href="#/">all pools</a></p>`;
      else toast(e.message, true);
    } finally {
      refreshing = null;
      if (again) { again = false; setTimeout(refresh, 250); }
    }
  })();
  return refreshing;
}

async function connectLive() {
  const live = $("#live");
  for (;;) {
    try {
      await stream("/api/live", {
        open: () => { live.textContent = "live"; live.className = "live on"; },
        changed: () => {
          live.textContent = "live"; live.className = "live on";
          if (view && view.name !== "log") refresh();
          else if (view && view.refresh) view.refresh();
        },
      });
    } catch (e) {
      if (e.status === 403) { live.textContent = "no token"; live.className = "live off"; return; }
    }
    live.textContent = "reconnecting…"; live.className = "live off";
    await new Promise(r => setTimeout(r, 1000));
  }
}

// ages and the cost so far change with the clock, not with the logs: a look every 10 s as well
setInterval(() => { if (view && view.name !== "log" && !document.hidden) refresh(); }, 10000);

let started = false;
async function start() {
  await takeToken();
  if (!token) { noToken(); return; }
  route();
  if (!started) { started = true; connectLive(); }
}

window.addEventListener("hashchange", () => {
  if (/^#(token|code)=/.test(location.hash)) start();  // the printed URL pasted into a tab already open
  else if (started) route();
});
start();
