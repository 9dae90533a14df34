// The shardcron dashboard: pages drawn from the HTTP/JSON API, routed by the URL's hash.
// Every call sends the owner typed in the header (kept in localStorage) as
// x-shardcron-owner, as the CLI and the SDK do; left empty, the node takes the token's
// one owner, or "default". A token typed in the header (kept in sessionStorage only, so
// it ends with the tab) goes as "authorization: Bearer TOKEN", for a node with an auth
// file. No build step, no dependencies.
"use strict";

const main = document.getElementById("main");
const ownerInput = document.getElementById("owner");
const tokenInput = document.getElementById("token");
ownerInput.value = localStorage.getItem("shardcron.owner") ?? "";
ownerInput.addEventListener("change", () => {
  localStorage.setItem("shardcron.owner", ownerInput.value.trim());
  route();
});
tokenInput.value = sessionStorage.getItem("shardcron.token") || "";
tokenInput.addEventListener("change", () => {
  sessionStorage.setItem("shardcron.token", tokenInput.value.trim());
  route();
});

// The headers of every call: who calls, for which owner.
function callHeaders() {
  const headers = {};
  const owner = ownerInput.value.trim();
  const token = tokenInput.value.trim();
  if (owner) headers["x-shardcron-owner"] = owner;
  if (token) headers.authorization = `Bearer ${token}`;
  return headers;
}

let pageTimer = null; // the refresh of the page shown, stopped when the page changes
let outputAbort = null; // the output stream of the run page shown

// --- the API -------------------------------------------------------------------------

async function api(method, path, body) {
  const headers = callHeaders();
  if (body !== undefined) headers["content-type"] = "application/json";
  const resp = await fetch(path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await resp.json();
  if (!resp.ok) {
    throw new Error(`${data.code}: ${data.message}`);
  }
  return data;
}

function showError(e) {
  const box = document.getElementById("error");
  box.textContent = String(e.message || e);
  box.hidden = false;
  setTimeout(() => { box.hidden = true; }, 6000);
}

// --- formatting --------------------------------------------------------------------------

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

// "RUN_STATE_RUNNING" -> "RUNNING"
function short(name, prefix) {
  return (name || `${prefix}UNSPECIFIED`).replace(prefix, "");
}

function stateCell(name, prefix) {
  const s = short(name, prefix);
  return `<span class="state state-${esc(s)}">${esc(s)}</span>`;
}

function when(ts) {
  return ts ? new Date(ts).toLocaleString() : "–";
}

function duration(run) {
  if (!run.startedAt) return "–";
  const end = run.endedAt ? new Date(run.endedAt) : new Date();
  const ms = end - new Date(run.startedAt);
  return ms < 1000 ? `${ms} ms` : ms < 120000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms / 60000)} min`;
}

// what a run's command used (run.usage; int64 fields arrive as strings)
function usage(run) {
  const u = run.usage;
  if (!u) return "–";
  const mib = Number(u.peakMemoryBytes || 0) / 1048576;
  const text = `peak memory ${mib.toFixed(1)} MiB, CPU ${Number(u.cpuSeconds || 0).toFixed(3)} s`;
  return u.limitsEnforced ? text : `${text} (limits not enforced on its worker)`;
}

function reason(run) {
  const r = short(run.reason, "RUN_REASON_");
  return r === "UNSPECIFIED" ? (run.waitingReason || "") : r;
}

function schedule(spec) {
  const s = spec.schedule || {};
  const kind = short(s.kind, "SCHEDULE_KIND_");
  if (kind === "CRON") return `cron ${s.cron} (${s.timezone || "UTC"})`;
  if (kind === "INTERVAL") return `every ${s.interval}`;
  if (kind === "AT") return `at ${when(s.at)}`;
  return kind.toLowerCase();
}

// A run's outcome as the health strips and charts colour it.
const FAILED_STATES = ["RUN_STATE_FAILED", "RUN_STATE_TIMED_OUT", "RUN_STATE_MISSED"];
const GOING_STATES = ["RUN_STATE_PENDING", "RUN_STATE_LEASED", "RUN_STATE_RUNNING"];

function outcome(state) {
  if (state === "RUN_STATE_SUCCEEDED") return "ok";
  if (FAILED_STATES.includes(state)) return "bad";
  if (GOING_STATES.includes(state)) return "going";
  return "other";
}

// A job's last runs (health.runs, newest first) as a strip of links, oldest left.
function healthStrip(health) {
  const runs = (health.runs || []).slice().reverse();
  if (!runs.length) return `<span class="muted">no runs</span>`;
  return `<span class="strip">${runs.map((r) => `<a class="tick tick-${outcome(r.state)}" href="#/runs/${esc(r.runId)}" title="${esc(short(r.state, "RUN_STATE_"))} · ${esc(when(r.dueAt))}" data-state="${esc(short(r.state, "RUN_STATE_"))}"></a>`).join("")}</span>`;
}

function successRate(health) {
  const rated = health.rated || 0;
  return rated ? `${Math.round(100 * (health.succeeded || 0) / rated)}% of ${rated}` : "–";
}

function setPage(name) {
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("active", a.dataset.page === name);
  }
}

function refresh(fn, ms) {
  pageTimer = setInterval(() => fn().catch(showError), ms);
}

// --- pages ---------------------------------------------------------------------------------

// The overview: what runs now, what waits and why, what failed, per minute (or per ten
// minutes over a day), and the jobs failing now; polled every OVERVIEW_EVERY ms and
// redrawn only where it changed. Each poller keeps this history in memory: it begins
// when the node started, and the page says so.
const OVERVIEW_EVERY = 5000;

function clock(ts) {
  return new Date(ts).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
}

function overviewCharts(o) {
  const buckets = o.buckets || [];
  const day = o.window === "OVERVIEW_WINDOW_DAY";
  const label = (b) => (day ? when(b.start) : clock(b.start));
  const every = Math.max(1, Math.floor(buckets.length / 6));
  const xLabels = buckets.map((b, i) => [i, clock(b.start)]).filter(([i]) => i % every === 0);
  const outcomes = charts.stackedBars(
    "chart-outcomes",
    buckets.map((b) => ({
      label: label(b),
      values: { ok: b.succeeded || 0, bad: b.failed || 0, other: b.other || 0 },
    })),
    [
      { key: "ok", label: "succeeded", cls: "ok" },
      { key: "bad", label: "failed", cls: "bad" },
      { key: "other", label: "cancelled or skipped", cls: "other" },
    ],
    xLabels,
  );
  const lag = charts.lines(
    "chart-lag",
    buckets.map((b) => ({
      label: label(b),
      values: { p50: b.lagP50Seconds ?? null, p99: b.lagP99Seconds ?? null },
    })),
    [
      { key: "p50", label: "start lag p50", cls: "s-p50" },
      { key: "p99", label: "start lag p99", cls: "s-p99" },
    ],
    xLabels,
    charts.seconds,
  );
  return { outcomes, lag };
}

function failingRows(jobs) {
  return jobs.map((j) => `
    <tr data-job-id="${esc(j.jobId)}">
      <td><a href="#/jobs/${esc(j.jobId)}">${esc(j.name)}</a></td>
      <td class="streak">${esc(j.consecutiveFailures || 0)}</td>
      <td>${stateCell(j.state, "RUN_STATE_")} ${esc(short(j.reason, "RUN_REASON_").replace("UNSPECIFIED", ""))}</td>
      <td class="mono">${esc(j.error || "")}</td>
      <td>${esc(when(j.endedAt))}</td>
      <td class="mono"><a href="#/runs/${esc(j.runId)}">${esc(j.runId)}</a></td>
    </tr>`).join("");
}

async function overviewPage(params) {
  setPage("overview");
  const span = params.get("window") === "day" ? "day" : "hour";
  main.innerHTML = `
    <h1>Overview</h1>
    <div class="toolbar">
      <button id="window-hour" class="${span === "hour" ? "active" : ""}">Last hour</button>
      <button id="window-day" class="${span === "day" ? "active" : ""}">Last day</button>
      <span id="history-since" class="muted"></span>
    </div>
    <div class="cards">
      <div class="card" id="card-running"><div class="figure">–</div><div class="label">running now</div></div>
      <div class="card" id="card-waiting"><div class="figure">–</div><div class="label">waiting</div></div>
      <div class="card" id="card-failed"><div class="figure">–</div><div class="label">failed in the last hour</div></div>
    </div>
    <ul id="waiting-reasons" class="reasons"></ul>
    <div class="grid-2">
      <div><h2>Runs by outcome</h2><div class="chart-box" id="outcomes"></div></div>
      <div><h2>Start lag</h2><div class="chart-box" id="lag"></div></div>
    </div>
    <h2>Failing now</h2>
    <table id="failing-jobs"><thead><tr><th>Job</th><th>Failures in a row</th><th>Last run</th><th>Error</th><th>Ended</th><th>Run</th></tr></thead><tbody></tbody></table>`;
  document.getElementById("window-hour").onclick = () => { location.hash = "#/overview"; };
  document.getElementById("window-day").onclick = () => { location.hash = "#/overview?window=day"; };
  const put = (id, html) => { // unchanged parts stay the same elements
    const el = document.getElementById(id);
    if (el && el.dataset.drawn !== html) {
      el.innerHTML = html;
      el.dataset.drawn = html;
    }
  };
  const draw = async () => {
    const o = await api("GET", `/v1/overview?window=${span.toUpperCase()}`);
    put("card-running", `<div class="figure">${esc(o.running || 0)}</div><div class="label">running now</div>`);
    put("card-waiting", `<div class="figure">${esc(o.waiting || 0)}</div><div class="label">waiting</div>`);
    document.getElementById("card-failed").classList.toggle("bad", (o.failedLastHour || 0) > 0);
    put("card-failed", `<div class="figure">${esc(o.failedLastHour || 0)}</div><div class="label">failed in the last hour</div>`);
    put("waiting-reasons", (o.waitingReasons || []).map((w) => `<li><b>${esc(w.runs)}</b> ${esc(w.reason)}</li>`).join(""));
    const { outcomes, lag } = overviewCharts(o);
    put("outcomes", outcomes);
    put("lag", lag);
    put("history-since", o.historySince
      ? `Counted since ${esc(when(o.historySince))}: each node keeps this history in memory, so it restarts with the node.`
      : "No poller answered: no history to show.");
    const failing = failingRows(o.failingJobs || []);
    document.querySelector("#failing-jobs tbody").innerHTML = failing || `<tr><td colspan="6" class="muted">No job is failing.</td></tr>`;
  };
  await draw();
  refresh(draw, OVERVIEW_EVERY);
}

async function jobsPage(params) {
  setPage("jobs");
  const state = params.get("state") || "";
  const q = params.get("q") || "";
  const token = params.get("token") || "";
  const query = new URLSearchParams({ pageSize: "20", withHealth: "true" });
  if (state) query.append("state", state);
  if (q) query.set("namePrefix", q);
  if (token) query.set("pageToken", token);
  const data = await api("GET", `/v1/jobs?${query}`);
  const states = ["", "ACTIVE", "PAUSED", "COMPLETED", "DELETED"];
  const rows = (data.jobs || []).map((j) => {
    const health = j.health || {};
    const last = (health.runs || []).find((r) => r.state !== "RUN_STATE_PENDING");
    return `
    <tr data-job-id="${esc(j.id)}">
      <td><a href="#/jobs/${esc(j.id)}">${esc(j.spec.name)}</a></td>
      <td>${stateCell(j.state, "JOB_STATE_")}</td>
      <td class="last-run">${last ? stateCell(last.state, "RUN_STATE_") : `<span class="muted">–</span>`}</td>
      <td>${healthStrip(health)}</td>
      <td class="success-rate">${esc(successRate(health))}</td>
      <td>${esc(schedule(j.spec))}</td>
      <td>${esc(when(j.nextFireAt))}</td>
      <td class="mono">${esc(j.id)}</td>
    </tr>`;
  }).join("");
  main.innerHTML = `
    <h1>Jobs</h1>
    <div class="toolbar">
      <select id="state-filter">${states.map((s) => `<option value="${s}" ${s === state ? "selected" : ""}>${s || "all but deleted"}</option>`).join("")}</select>
      <input id="name-search" placeholder="name starts with…" value="${esc(q)}">
      <button id="search">Search</button>
      ${token ? `<button id="first-page">First page</button>` : ""}
      ${data.nextPageToken ? `<button id="next-page">Next page</button>` : ""}
    </div>
    <table id="jobs-table">
      <thead><tr><th>Name</th><th>State</th><th>Last run</th><th>Last 20 runs</th><th>Success</th><th>Schedule</th><th>Next fire</th><th>Id</th></tr></thead>
      <tbody>${rows || `<tr><td colspan="8" class="muted">No jobs.</td></tr>`}</tbody>
    </table>`;
  const go = (extra) => {
    const p = new URLSearchParams();
    const s = document.getElementById("state-filter").value;
    const n = document.getElementById("name-search").value.trim();
    if (s) p.set("state", s);
    if (n) p.set("q", n);
    if (extra) p.set("token", extra);
    location.hash = `#/jobs?${p}`;
  };
  document.getElementById("search").onclick = () => go();
  document.getElementById("state-filter").onchange = () => go();
  document.getElementById("name-search").onkeydown = (e) => { if (e.key === "Enter") go(); };
  const next = document.getElementById("next-page");
  if (next) next.onclick = () => go(data.nextPageToken);
  const first = document.getElementById("first-page");
  if (first) first.onclick = () => go();
}

function runsTable(runs, withJob) {
  const rows = runs.map((r) => `
    <tr data-run-id="${esc(r.id)}">
      <td class="mono"><a href="#/runs/${esc(r.id)}">${esc(r.id)}</a></td>
      ${withJob ? `<td class="mono"><a href="#/jobs/${esc(r.jobId)}">${esc(r.jobId)}</a></td>` : ""}
      <td>${stateCell(r.state, "RUN_STATE_")}</td>
      <td>${esc(r.attempt || 1)}</td>
      <td>${esc(when(r.dueAt))}</td>
      <td>${esc(duration(r))}</td>
      <td>${esc(reason(r))}</td>
    </tr>`).join("");
  const cols = withJob ? 7 : 6;
  return `<table class="runs">
    <thead><tr><th>Run</th>${withJob ? "<th>Job</th>" : ""}<th>State</th><th>Attempt</th><th>Due</th><th>Duration</th><th>Reason</th></tr></thead>
    <tbody>${rows || `<tr><td colspan="${cols}" class="muted">No runs.</td></tr>`}</tbody></table>`;
}

// A fire whose UTC offset differs from the one before it crossed a DST change.
function dstNotes(fires) {
  let prev = null;
  return fires.map((f) => {
    const offset = (f.localTime || "").slice(-6);
    const notes = [];
    if (prev !== null && offset !== prev) notes.push(`UTC offset ${prev} → ${offset} (DST change)`);
    if (f.skipReason) notes.push(`skipped: ${short(f.skipReason, "RUN_REASON_")}`);
    prev = offset;
    return notes.join("; ");
  });
}

async function jobPage(jobId) {
  setPage("jobs");
  const draw = async () => {
    const [job, runs] = await Promise.all([
      api("GET", `/v1/jobs/${encodeURIComponent(jobId)}`),
      api("GET", `/v1/jobs/${encodeURIComponent(jobId)}/runs?pageSize=25`),
    ]);
    const state = short(job.state, "JOB_STATE_");
    const kind = short((job.spec.schedule || {}).kind, "SCHEDULE_KIND_");
    let fires = [];
    if (!["COMPLETED", "DELETED"].includes(state) && kind !== "IMMEDIATE") {
      fires = (await api("POST", "/v1/preview", { jobId, count: 5 })).fires || [];
    }
    const notes = dstNotes(fires);
    main.innerHTML = `
      <h1>${esc(job.spec.name)} ${stateCell(job.state, "JOB_STATE_")}</h1>
      <div class="toolbar">
        ${state === "ACTIVE" ? `<button id="pause-job">Pause</button>` : ""}
        ${state === "PAUSED" ? `<button id="resume-job">Resume</button>` : ""}
        ${state === "ACTIVE" || state === "COMPLETED" ? `<button id="run-now">Run now</button>` : ""}
        ${state !== "DELETED" ? `<button id="delete-job" class="danger">Delete</button>` : ""}
        ${job.pauseReason ? `<span class="muted">paused: ${esc(job.pauseReason)}</span>` : ""}
      </div>
      <dl>
        <dt>Id</dt><dd class="mono">${esc(job.id)}</dd>
        <dt>Schedule</dt><dd>${esc(schedule(job.spec))}</dd>
        <dt>Version</dt><dd>${esc(job.version)}</dd>
        <dt>Created</dt><dd>${esc(when(job.createdAt))}</dd>
        ${job.spec.notify ? `<dt>Notifies</dt><dd id="job-notify">${esc(job.spec.notify.webhookUrl)} · <a href="#/notifications?job=${encodeURIComponent(job.id)}">its deliveries</a></dd>` : ""}
      </dl>
      <div id="job-health"></div>
      <h2>Next fires</h2>
      <table id="next-fires"><thead><tr><th>Local time</th><th>UTC</th><th>Note</th></tr></thead><tbody>
      ${fires.map((f, i) => `<tr><td>${esc(f.localTime)}</td><td>${esc(f.at)}</td><td class="note">${esc(notes[i])}</td></tr>`).join("") || `<tr><td colspan="3" class="muted">None.</td></tr>`}
      </tbody></table>
      <h2>Runs</h2>
      <div id="job-runs">${runsTable(runs.runs || [], false)}</div>
      <h2>Spec</h2>
      <pre class="spec">${esc(JSON.stringify(job.spec, null, 2))}</pre>`;
    const act = (id, fn) => {
      const b = document.getElementById(id);
      if (b) b.onclick = () => fn().then(draw).catch(showError);
    };
    const path = `/v1/jobs/${encodeURIComponent(jobId)}`;
    act("pause-job", () => api("POST", `${path}/pause`, {}));
    act("resume-job", () => api("POST", `${path}/resume`, {}));
    act("run-now", () => api("POST", `${path}/runNow`, {}));
    act("delete-job", async () => {
      if (confirm(`Delete job ${job.spec.name}?`)) await api("DELETE", path);
    });
    await drawJobHealth(runs.runs || []);
  };
  await draw();
  refresh(async () => {
    const runs = await api("GET", `/v1/jobs/${encodeURIComponent(jobId)}/runs?pageSize=25`);
    await drawJobHealth(runs.runs || []);
    const box = document.getElementById("job-runs");
    const html = runsTable(runs.runs || [], false);
    if (box && box.dataset.drawn !== html) { // unchanged rows stay the same elements
      box.innerHTML = html;
      box.dataset.drawn = html;
    }
  }, 2000);
}

// The last bytes of a run's output, as text (kept by run id: a final run's never change).
const TAIL_BYTES = 4096;
const tails = new Map();

async function outputTail(runId) {
  if (!tails.has(runId)) {
    const resp = await fetch(
      `/v1/runs/${encodeURIComponent(runId)}/output?format=text&offset=-${TAIL_BYTES}`,
      { headers: callHeaders() },
    );
    if (!resp.ok) throw new Error((await resp.json()).message);
    tails.set(runId, await resp.text());
  }
  return tails.get(runId);
}

function seconds(from, to) {
  return from && to ? Math.max(0, (new Date(to) - new Date(from)) / 1000) : null;
}

// The job page's health: its last failure inline (state, reason, exit code, error, the
// tail of its output), and a chart of its runs' durations and start lags, oldest left.
async function drawJobHealth(runs) {
  const box = document.getElementById("job-health");
  if (!box) return;
  const failed = runs.find((r) => outcome(r.state) === "bad");
  const latest = runs.find((r) => ["ok", "bad"].includes(outcome(r.state)));
  let failure = "";
  if (failed) {
    const tail = await outputTail(failed.id).catch((e) => `(its output could not be read: ${e.message})`);
    const exit = failed.hasExitCode ? `exit code ${failed.exitCode || 0}` : "no exit code";
    const title = failed === latest ? "Failing now" : "Last failure";
    failure = `
      <h2>${title}</h2>
      <div id="last-failure" class="failure" data-run-id="${esc(failed.id)}">
        <div>${stateCell(failed.state, "RUN_STATE_")} <span class="reason">${esc(reason(failed))}</span>
          · <span class="exit-code">${esc(exit)}</span> · ended ${esc(when(failed.endedAt))}
          · <a href="#/runs/${esc(failed.id)}">run ${esc(failed.id)}</a></div>
        ${failed.error && failed.error !== exit ? `<div class="failure-error">${esc(failed.error)}</div>` : ""}
        <pre id="failure-output">${esc(tail || "(no output)")}</pre>
      </div>`;
  }
  const started = runs.filter((r) => r.startedAt).slice().reverse();
  const points = started.map((r) => ({
    label: when(r.dueAt),
    values: {
      duration: isFinal(r.state) ? seconds(r.startedAt, r.endedAt) : null,
      lag: seconds(r.dueAt, r.startedAt),
    },
  }));
  const xLabels = points.length ? [[0, when(started[0].dueAt)], [points.length - 1, when(started[started.length - 1].dueAt)]] : [];
  const chart = points.length
    ? charts.lines("job-timings", points, [
      { key: "duration", label: "duration", cls: "s-duration" },
      { key: "lag", label: "start lag", cls: "s-lag" },
    ], points.length > 1 ? xLabels : xLabels.slice(0, 1), charts.seconds)
    : `<p class="muted">No run has started yet.</p>`;
  const html = `${failure}<h2>Duration and start lag of its last ${started.length} started runs</h2><div class="chart-box">${chart}</div>`;
  if (box.dataset.drawn !== html) {
    box.innerHTML = html;
    box.dataset.drawn = html;
  }
}

// The run's output as it is written, from its last OUTPUT_SHOWN bytes (a node with a blob
// store keeps all of it: up to a GiB by default). A node ends a follow after some
// minutes, without the run having ended: the page follows again from the bytes it has,
// until the run is final or its job deleted.
const OUTPUT_SHOWN = 1 << 20;

async function followOutput(runId, pre) {
  outputAbort = new AbortController();
  const decoder = new TextDecoder();
  const path = `/v1/runs/${encodeURIComponent(runId)}`;
  pre.textContent = "";
  // where the last OUTPUT_SHOWN bytes start: the offset of the first of them
  const first = await api("GET", `${path}/output?offset=-${OUTPUT_SHOWN}&limit=1`);
  let received = first.chunks.length ? Number(first.chunks[0].offset || 0) : 0;
  if (received > 0) {
    pre.textContent = `[the first ${received} bytes: shardcron run logs ${runId} --head ${received}]\n`;
  }
  for (;;) {
    const resp = await fetch(`${path}/output?format=text&follow=true&offset=${received}`, {
      headers: callHeaders(),
      signal: outputAbort.signal,
    });
    if (!resp.ok) throw new Error((await resp.json()).message);
    const reader = resp.body.getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      received += value.length;
      pre.textContent += decoder.decode(value, { stream: true });
      pre.scrollTop = pre.scrollHeight;
    }
    const run = await api("GET", path);
    if (isFinal(run.state)) break;
    const job = await api("GET", `/v1/jobs/${encodeURIComponent(run.jobId)}`);
    if (job.state === "JOB_STATE_DELETED") break;
  }
  pre.dataset.ended = "true";
}

function isFinal(state) {
  return !["RUN_STATE_PENDING", "RUN_STATE_LEASED", "RUN_STATE_RUNNING"].includes(state);
}

async function runPage(runId) {
  setPage("running");
  const path = `/v1/runs/${encodeURIComponent(runId)}`;
  const run = await api("GET", path);
  main.innerHTML = `
    <h1>Run <span class="mono">${esc(run.id)}</span></h1>
    <div class="toolbar">
      <span id="run-state">${stateCell(run.state, "RUN_STATE_")}</span>
      <button id="cancel-run" class="danger">Cancel</button>
      <a href="#/jobs/${esc(run.jobId)}">its job</a>
    </div>
    <dl id="run-fields"></dl>
    <h2>Output</h2>
    <pre id="run-output"></pre>
    <h2>Result files</h2>
    <div id="run-results"></div>`;
  const draw = (r) => {
    document.getElementById("run-state").innerHTML = stateCell(r.state, "RUN_STATE_");
    const final = isFinal(r.state);
    document.getElementById("cancel-run").hidden = final;
    document.getElementById("run-fields").innerHTML = `
      <dt>Job</dt><dd class="mono">${esc(r.jobId)}</dd>
      <dt>Attempt</dt><dd>${esc(r.attempt || 1)}</dd>
      <dt>Due</dt><dd>${esc(when(r.dueAt))}</dd>
      <dt>Started</dt><dd>${esc(when(r.startedAt))}</dd>
      <dt>Ended</dt><dd>${esc(when(r.endedAt))}</dd>
      <dt>Duration</dt><dd>${esc(duration(r))}</dd>
      <dt>Worker</dt><dd>${esc(r.workerId || "–")}</dd>
      <dt>Exit code</dt><dd>${r.hasExitCode ? esc(r.exitCode || 0) : "–"}</dd>
      <dt>Used</dt><dd id="run-usage">${esc(usage(r))}</dd>
      <dt>Late</dt><dd id="run-late">${r.lateness ? esc(r.lateness.text) : "–"}</dd>
      <dt>Reason</dt><dd>${esc(reason(r) || "–")}${r.error ? ` <span class="muted">${esc(r.error)}</span>` : ""}</dd>`;
    drawResults(document.getElementById("run-results"), r);
  };
  draw(run);
  document.getElementById("cancel-run").onclick = () =>
    api("POST", `${path}/cancel`).then(draw).catch(showError);
  refresh(async () => draw(await api("GET", path)), 1000);
  followOutput(runId, document.getElementById("run-output")).catch((e) => {
    if (e.name !== "AbortError") showError(e);
  });
}

// The run's result files (what its command left in $SHARDCRON_RESULT_DIR), each a link
// that downloads it with the page's owner and token, and what was left out.
function drawResults(box, run) {
  const files = run.results || [];
  const rows = files.map((f) => `<tr>
      <td class="mono"><a href="#" data-result="${esc(f.name)}">${esc(f.name)}</a></td>
      <td>${esc(f.size || 0)}</td><td class="mono">${esc(f.sha256)}</td></tr>`).join("");
  const table = files.length
    ? `<table><tr><th>Name</th><th>Bytes</th><th>SHA-256</th></tr>${rows}</table>`
    : `<p class="muted">${isFinal(run.state) ? "none" : "listed once the run ends"}</p>`;
  const note = run.resultsNote ? `<p class="note">Left out: ${esc(run.resultsNote)}</p>` : "";
  const html = table + note;
  if (box.dataset.drawn !== html) {
    box.innerHTML = html;
    box.dataset.drawn = html;
  }
  box.onclick = (event) => {
    const link = event.target.closest("a[data-result]");
    if (!link) return;
    event.preventDefault();
    downloadResult(run.id, link.dataset.result).catch(showError);
  };
}

async function downloadResult(runId, name) {
  const path = `/v1/runs/${encodeURIComponent(runId)}/results/${encodeURIComponent(name)}`;
  const resp = await fetch(path, { headers: callHeaders() });
  if (!resp.ok) throw new Error((await resp.json()).message);
  const url = URL.createObjectURL(await resp.blob());
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
}

async function runningPage() {
  setPage("running");
  const draw = async () => {
    let runs = [];
    let token = "";
    do { // a page may be short while a token follows: read on to 100 runs
      const q = new URLSearchParams({ state: "RUNNING", pageSize: "100" });
      if (token) q.set("pageToken", token);
      const page = await api("GET", `/v1/runs?${q}`);
      runs = runs.concat(page.runs || []);
      token = page.nextPageToken || "";
    } while (token && runs.length < 100);
    main.innerHTML = `<h1>Running now</h1>${runsTable(runs, true)}`;
  };
  await draw();
  refresh(draw, 2000);
}

async function deadPage() {
  setPage("dead");
  const data = await api("GET", "/v1/deadLetters?pageSize=100");
  const rows = (data.runs || []).map((r) => `
    <tr data-run-id="${esc(r.id)}">
      <td class="mono"><a href="#/runs/${esc(r.id)}">${esc(r.id)}</a></td>
      <td class="mono"><a href="#/jobs/${esc(r.jobId)}">${esc(r.jobId)}</a></td>
      <td>${stateCell(r.state, "RUN_STATE_")}</td><td>${esc(r.attempt || 1)}</td>
      <td>${esc(reason(r))}</td><td>${esc(when(r.endedAt))}</td>
      <td><button class="replay" data-run-id="${esc(r.id)}">Replay</button>
          <button class="drop danger" data-run-id="${esc(r.id)}">Drop</button></td>
    </tr>`).join("");
  main.innerHTML = `<h1>Dead letters</h1>
    <table id="dead-table"><thead><tr><th>Run</th><th>Job</th><th>State</th><th>Attempt</th><th>Reason</th><th>Ended</th><th></th></tr></thead>
    <tbody>${rows || `<tr><td colspan="7" class="muted">No dead letters.</td></tr>`}</tbody></table>`;
  for (const b of main.querySelectorAll("button.replay, button.drop")) {
    const verb = b.classList.contains("replay") ? "replay" : "drop";
    b.onclick = () => api("POST", `/v1/deadLetters/${verb}`, { runIds: [b.dataset.runId] })
      .then(deadPage).catch(showError);
  }
}

// The webhook deliveries of the owner's notifications (of one job with ?job=ID), newest
// first: each one's rule, why it matched, its status, attempts and what the last failed
// attempt met.
async function notificationsPage(params) {
  setPage("notifications");
  const job = params.get("job") || "";
  const draw = async () => {
    const query = `/v1/deliveries?pageSize=100${job ? `&jobId=${encodeURIComponent(job)}` : ""}`;
    const data = await api("GET", query);
    const rows = (data.deliveries || []).map((d) => `
      <tr data-delivery-id="${esc(d.id)}">
        <td class="mono"><a href="#/jobs/${esc(d.jobId)}">${esc(d.jobId)}</a></td>
        <td class="mono"><a href="#/runs/${esc(d.runId)}">${esc(d.runId)}</a></td>
        <td class="rule">${esc(short(d.rule, "NOTIFY_RULE_"))}</td><td>${esc(d.reason)}</td>
        <td class="status">${stateCell(d.status, "DELIVERY_STATUS_")}</td>
        <td class="attempts">${esc(d.attempts || 0)}</td>
        <td>${esc(when(d.deliveredAt || d.lastAttemptAt || d.createdAt))}</td>
        <td class="mono last-error">${esc(d.lastError || "")}</td>
      </tr>`).join("");
    main.innerHTML = `<h1>Notifications${job ? ` of job <span class="mono">${esc(job)}</span>` : ""}</h1>
      <p class="muted">Webhook deliveries of runs' ends, newest first: a job's rules are set with
      <span class="mono">--notify-webhook URL --notify-on RULES</span>.</p>
      <table id="deliveries"><thead><tr><th>Job</th><th>Run</th><th>Rule</th><th>Reason</th><th>Status</th><th>Attempts</th><th>Last</th><th>Last error</th></tr></thead>
      <tbody>${rows || `<tr><td colspan="8" class="muted">No deliveries.</td></tr>`}</tbody></table>`;
  };
  await draw();
  refresh(draw, 5000);
}

async function clusterPage() {
  setPage("cluster");
  const draw = async () => {
    const c = await api("GET", "/v1/cluster");
    const byOwner = {};
    for (const s of c.shards || []) {
      const o = s.owner || "(none)";
      byOwner[o] = byOwner[o] || { shards: [], lag: 0 };
      byOwner[o].shards.push(s.shard || 0);
      byOwner[o].lag = Math.max(byOwner[o].lag, s.lagSeconds || 0);
    }
    main.innerHTML = `
      <h1>Cluster</h1>
      <dl id="cluster-fields">
        <dt>Mode</dt><dd>${esc(c.mode)}</dd>
        <dt>Leader</dt><dd id="leader">${esc(c.leader || "none")}</dd>
        <dt>Epoch</dt><dd>${esc(c.epoch || 0)}</dd>
        <dt>Members</dt><dd>${esc((c.members || []).join(", "))}</dd>
      </dl>
      <h2>Pollers</h2>
      <table><thead><tr><th>Poller</th><th>Shards</th><th>Count</th><th>Max lag</th></tr></thead><tbody>
      ${Object.entries(byOwner).map(([o, v]) => `<tr><td>${esc(o)}</td><td class="mono">${esc(v.shards.join(" "))}</td><td>${v.shards.length}</td><td>${v.lag.toFixed(2)} s</td></tr>`).join("")}
      </tbody></table>
      <h2>Workers</h2>
      <table id="workers"><thead><tr><th>Worker</th><th>Slots used</th><th>Slots free</th><th>Handlers</th><th>Pollers</th><th>Connected</th></tr></thead><tbody>
      ${(c.workers || []).map((w) => `<tr><td>${esc(w.id)}</td><td>${w.slotsUsed || 0}</td><td>${(w.slotsTotal || 0) - (w.slotsUsed || 0)}</td><td>${esc((w.handlers || []).join(", "))}${w.handlersOmitted ? ` (+${w.handlersOmitted} more)` : ""}</td><td>${esc((w.pollers || []).join(", "))}</td><td>${esc(when(w.connectedAt))}</td></tr>`).join("") || `<tr><td colspan="6" class="muted">No workers.</td></tr>`}
      </tbody></table>
      ${c.workersOmitted ? `<p class="muted">… and ${c.workersOmitted} more workers</p>` : ""}`;
  };
  await draw();
  refresh(draw, 3000);
}

// --- routing ------------------------------------------------------------------------------

function route() {
  clearInterval(pageTimer);
  if (outputAbort) outputAbort.abort();
  outputAbort = null;
  const [path, query] = (location.hash.slice(1) || "/overview").split("?");
  const params = new URLSearchParams(query || "");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  let page;
  if (parts[0] === "jobs" && parts[1]) page = jobPage(parts[1]);
  else if (parts[0] === "runs" && parts[1]) page = runPage(parts[1]);
  else if (parts[0] === "running") page = runningPage();
  else if (parts[0] === "dead") page = deadPage();
  else if (parts[0] === "cluster") page = clusterPage();
  else if (parts[0] === "notifications") page = notificationsPage(params);
  else if (parts[0] === "jobs") page = jobsPage(params);
  else page = overviewPage(params);
  page.catch((e) => {
    main.innerHTML = `<p class="error-inline">${esc(e.message)}</p>`;
    showError(e);
  });
}

window.addEventListener("hashchange", route);
route();
