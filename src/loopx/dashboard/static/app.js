// loopx dashboard front end. Plain ES module, no build step, no inline script.
// Every piece of agent-provided text reaches the page through text nodes (textContent), never HTML.

const POLL_MS = 3000;
const GROUPS = [
  ["needs_you", "Needs you", "A human decision is waiting, the goal is stuck (stalled, nothing changed, a verify command that cannot run), or it looks complete."],
  ["running", "Running", "A turn is open or an agent holds a live lease."],
  ["ready", "Ready", "Work is ready for the next scheduled turn."],
  ["waiting", "Waiting", "Budget, cooldown or nothing to do yet; the next check time is shown."],
  ["stopped", "Paused, stopped or done", ""],
];
const BOARD = ["open", "claimed", "expired", "blocked", "done"];

const session = { csrf: null, header: "X-Loopx-Token", human: null, trace: null };
const view = { key: "", lastText: null, timer: null, offset: 0, busy: false, again: false };

// ---------------------------------------------------------------- DOM helpers
function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "href" && !String(v).startsWith("#")) throw new Error("only in-app links");
    else el.setAttribute(k, String(v));
  }
  for (const kid of kids.flat(4)) {
    if (kid === null || kid === undefined || kid === false) continue;
    el.append(kid instanceof Node ? kid : String(kid)); // strings become text nodes
  }
  return el;
}

const SVG_NS = "http://www.w3.org/2000/svg";
function s(tag, attrs, ...kids) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const kid of kids) el.append(kid instanceof Node ? kid : String(kid));
  return el;
}

function chip(text, kind) {
  return h("span", { class: `chip chip-${kind || String(text).replace(/[^a-z_]/g, "")}` }, text);
}

function when(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return d.toLocaleString(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
}

function whenExact(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return d.toLocaleString(undefined, { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

function span(seconds) {
  const a = Math.abs(Math.round(seconds));
  if (a < 60) return `${a}s`;
  if (a < 3600) return `${Math.floor(a / 60)}m ${a % 60}s`;
  if (a < 86400) return `${Math.floor(a / 3600)}h ${Math.floor((a % 3600) / 60)}m`;
  const d = Math.floor(a / 86400), hr = Math.floor((a % 86400) / 3600);
  return hr ? `${d}d ${hr}h` : `${d}d`;
}

// A live countdown to an ISO time, refreshed every second by tick().
function countdown(iso, past) {
  return h("span", { class: "countdown", "data-until": iso, "data-past": past || "expired" }, "…");
}

function tick() {
  const now = Date.now() + view.offset;
  for (const el of document.querySelectorAll(".countdown")) {
    const left = (new Date(el.dataset.until).getTime() - now) / 1000;
    el.textContent = left > 0 ? `in ${span(left)}` : `${el.dataset.past} ${span(left)} ago`;
    el.classList.toggle("late", left <= 0);
  }
}

// ---------------------------------------------------------------- API
class ApiError extends Error {
  constructor(status, error) {
    super((error && error.message) || `HTTP ${status}`);
    this.status = status;
    this.hint = error && error.hint;
  }
}

const tagged = new Map();  // path -> {tag, data}: the last answer that carried an ETag

async function getJSON(path) {
  let response;
  const last = tagged.get(path);
  const headers = { Accept: "application/json" };
  if (last) headers["If-None-Match"] = last.tag;
  try {
    response = await fetch(path, { credentials: "same-origin", cache: "no-store", headers });
  } catch (err) {
    throw new ApiError(0, { message: "the dashboard server does not answer",
      hint: "If it stopped, `loopx dashboard` starts it again and opens a fresh link." });
  }
  if (response.status === 304 && last) return last.data;  // unchanged since the last answer
  let body = null;
  try { body = await response.json(); } catch (err) { body = null; }
  if (!response.ok || !body || body.ok !== true) throw new ApiError(response.status, body && body.error);
  const tag = response.headers.get("ETag");
  if (tag) tagged.set(path, { tag, data: body.data }); else tagged.delete(path);
  return body.data;
}

async function postJSON(path, payload) {
  if (!session.csrf) await loadSession();
  const response = await fetch(path, {
    method: "POST", credentials: "same-origin", cache: "no-store",
    headers: { "Content-Type": "application/json", [session.header]: session.csrf },
    body: JSON.stringify(payload),
  });
  let body = null;
  try { body = await response.json(); } catch (err) { body = null; }
  if (!response.ok || !body || body.ok !== true) throw new ApiError(response.status, body && body.error);
  return body.data;
}

async function loadSession() {
  const data = await getJSON("/api/session");
  session.csrf = data.csrf;
  session.header = data.header;
  session.human = data.human;
  session.trace = data.trace || null;
  if (session.trace) traceMode(session.trace);
}

// ---------------------------------------------------------------- routing and refresh
function route() {
  const parts = (location.hash || "#/").slice(2).split("/").map((p) => decodeURIComponent(p));
  if (parts[0] === "goal" && parts.length >= 3) return { name: "goal", project: parts[1], goal: parts[2], gate: parts[3] || null };
  if (parts[0] === "agents") return { name: "agents" };
  return { name: "overview" };
}

function endpoint(r) {
  if (session.trace) return "/api/trace";
  if (r.name === "goal") return `/api/goal?project=${encodeURIComponent(r.project)}&goal=${encodeURIComponent(r.goal)}`;
  if (r.name === "agents") return "/api/agents";
  return "/api/status";
}

function setLive(ok, text) {
  const live = document.getElementById("live");
  live.textContent = text;
  live.className = `live ${ok ? "live-ok" : "live-bad"}`;
}

function showError(err) {
  view.lastText = null;
  const main = document.getElementById("main");
  const signedOut = err.status === 401;
  setLive(false, signedOut ? "not signed in" : "offline — not live");
  const updated = document.getElementById("updated");
  updated.textContent = updated.textContent.replace(/^updated /, "last live update ");
  const banner = document.getElementById("banner");
  banner.hidden = false;
  banner.textContent = signedOut
    ? "This browser is not signed in to the dashboard."
    : `The dashboard API failed: ${err.message}. Nothing on this page is live until it answers again.`;
  main.replaceChildren(h("section", { class: "error-panel" },
    h("h2", {}, signedOut ? "Open the dashboard from your terminal" : "No live data"),
    h("p", {}, signedOut
      ? "Run the command below; it opens (or prints) a single-use link that signs this browser in."
      : "The last data shown was removed so it cannot be mistaken for the current state. Retrying every few seconds."),
    h("pre", { class: "cmd" }, signedOut ? "loopx dashboard" : "loopx dashboard --status"),
    err.hint ? h("p", { class: "muted" }, err.hint) : null));
}

function keepInputs() {
  const kept = {};
  for (const el of document.querySelectorAll("[data-keep]")) kept[el.dataset.keep] = el.value;
  const active = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.keep : null;
  return { kept, active };
}

function restoreInputs({ kept, active }) {
  for (const el of document.querySelectorAll("[data-keep]")) {
    if (kept[el.dataset.keep] !== undefined) {
      el.value = kept[el.dataset.keep];
      el.dispatchEvent(new Event("input"));
    }
    if (el.dataset.keep === active) el.focus();
  }
}

async function refresh(force) {
  if (view.busy) { view.again = true; return; }
  view.busy = true;
  const r = route();
  const key = JSON.stringify(r);
  try {
    if (!session.csrf) await loadSession();
    const data = await getJSON(endpoint(r));
    if (data.generated_at) view.offset = new Date(data.generated_at).getTime() - Date.now();
    const text = JSON.stringify({ ...data, generated_at: null });
    document.getElementById("banner").hidden = true;
    setLive(true, session.trace ? "read-only trace" : "live");
    document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
    if (force || key !== view.key || text !== view.lastText) {
      const inputs = keepInputs();
      const main = document.getElementById("main");
      const page = session.trace ? tracePage(data)
        : r.name === "goal" ? goalPage(data) : r.name === "agents" ? agentsPage(data) : overviewPage(data);
      main.replaceChildren(page);
      if (key !== view.key) {
        // a notification's link names the gate (#/goal/<project>/<goal>/<gate>): show that card
        const card = r.gate ? [...main.querySelectorAll("[data-gate]")].find((el) => el.dataset.gate === r.gate) : null;
        if (card) { card.classList.add("linked"); card.scrollIntoView({ block: "center" }); } else window.scrollTo(0, 0);
      }
      restoreInputs(inputs);
      view.key = key;
      view.lastText = text;
      tick();
    }
  } catch (err) {
    if (err.status === 401) session.csrf = null;
    showError(err instanceof ApiError ? err : new ApiError(0, { message: String(err) }));
  } finally {
    view.busy = false;
  }
  if (view.again) { view.again = false; await refresh(true); return; }
  for (const a of document.querySelectorAll("[data-nav]")) {
    a.classList.toggle("current", a.dataset.nav === (r.name === "agents" ? "agents" : "overview"));
  }
}

// ---------------------------------------------------------------- overview
function goalLink(projectKey, goalId) {
  return `#/goal/${encodeURIComponent(projectKey)}/${encodeURIComponent(goalId)}`;
}

function todoCounts(t) {
  const parts = [];
  for (const k of ["open", "claimed", "expired", "blocked", "done"]) if (t[k]) parts.push(`${t[k]} ${k}`);
  return parts.length ? parts.join(" · ") : "no todos";
}

function goalCard(project, g) {
  const b = g.budget;
  return h("article", { class: `card group-${g.group}` },
    h("div", { class: "card-head" },
      h("a", { class: "goal-link", href: goalLink(project.key, g.id) }, g.id),
      chip(g.status), h("span", { class: "muted small" }, project.name)),
    h("p", { class: "objective" }, g.objective),
    h("p", { class: "reason" }, g.reason,
      g.next_check_at ? h("span", { class: "muted" }, " · next check ", countdown(g.next_check_at, "due")) : null),
    g.needs_human.length ? h("ul", { class: "gate-list" }, g.needs_human.map((gate) =>
      h("li", {}, chip(gate.kind, "gate"), " ", gate.question))) : null,
    h("p", { class: "meta" }, todoCounts(g.todos), ` · budget ${b.spent}/${b.slots} slots`,
      g.last_run && g.last_run.finished ? ` · last run ${when(g.last_run.started)}: ${g.last_run.result}` : ""),
    (g.open_runs || []).length ? h("ul", { class: "run-list small" }, g.open_runs.map((r) =>
      h("li", {}, `${r.id} · ${r.agent} · ${r.todo || "planning"}`,
        r.worktree ? h("span", { class: "muted" }, ` · worktree ${r.worktree.branch}`) : null))) : null,
    g.needs_human.length
      ? h("p", { class: "next" }, h("a", { href: goalLink(project.key, g.id), class: "decide-link" },
        `Decide ${g.needs_human.length > 1 ? "the gates" : "the gate"} →`))
      : g.group === "waiting" && g.next_check_at
        ? h("p", { class: "next" }, "next: nothing to do until the next check")
        : h("p", { class: "next" }, "next: ", h("code", {}, g.next)));
}

function overviewPage(data) {
  const root = h("div", { class: "page" });
  const counts = data.counts;
  root.append(h("h1", {}, "All goals"),
    h("div", { class: "counters" }, GROUPS.map(([k, label]) =>
      h("div", { class: `counter group-${k}` }, h("strong", {}, String(counts[k] || 0)), h("span", {}, label)))));
  if (!data.projects.length) {
    root.append(h("section", { class: "empty" }, h("h2", {}, "No project is connected yet"),
      h("p", {}, "Connect a project and start a goal; it shows up here within a few seconds."),
      h("pre", { class: "cmd" }, "cd your-project\nloopx connect\nloopx start-goal --goal-text \"...\" --done-when \"...\"")));
    return root;
  }
  for (const p of data.projects) {
    if (p.error) root.append(h("section", { class: "error-panel" }, h("h2", {}, `${p.name}: cannot read the store`),
      h("p", {}, p.error.message), p.error.hint ? h("p", { class: "muted" }, p.error.hint) : null));
    for (const problem of p.problems || []) root.append(h("p", { class: "warn" }, `${p.name}: ${problem}`));
  }
  for (const [key, label, help] of GROUPS) {
    const cards = [];
    for (const p of data.projects) for (const g of p.goals) if (g.group === key) cards.push(goalCard(p, g));
    if (!cards.length) continue;
    root.append(h("section", { class: `group group-${key}` }, h("h2", {}, label, " ", h("span", { class: "muted small" }, help)),
      h("div", { class: "cards" }, cards)));
  }
  if (!data.projects.some((p) => p.goals.length)) {
    root.append(h("section", { class: "empty" }, h("h2", {}, "No goals yet"),
      h("pre", { class: "cmd" }, "loopx start-goal --goal-text \"...\" --done-when \"...\"")));
  }
  return root;
}

// ---------------------------------------------------------------- goal page
function gateForm(project, gate) {
  const status = h("p", { class: "form-status", role: "status" });
  const code = h("input", { type: "text", autocomplete: "off", spellcheck: "false", autocapitalize: "off", "data-keep": `code-${gate.id}`,
    "aria-label": `confirmation code for ${gate.id}`, placeholder: "code", maxlength: "64", class: "code-input" });
  const note = h("textarea", { rows: "2", maxlength: "2000", "data-keep": `note-${gate.id}`, "aria-label": "note",
    placeholder: "note (required to reject)" });
  const approve = h("button", { type: "button", class: "approve", disabled: "" }, "Approve");
  const reject = h("button", { type: "button", class: "reject", disabled: "" }, "Reject");
  const sync = () => {
    const ok = code.value.trim().toLowerCase() === gate.code;
    approve.disabled = !ok;
    reject.disabled = !ok || !note.value.trim();
  };
  code.addEventListener("input", sync);
  note.addEventListener("input", sync);
  const send = async (decision) => {
    approve.disabled = reject.disabled = true;
    status.textContent = "sending…";
    try {
      const res = await postJSON("/api/gate", { project: project.key, gate: gate.id, decision, code: code.value.trim(), note: note.value.trim() || null });
      status.textContent = `${res.status} by ${res.decided_by}`;
      code.value = "";
      note.value = "";
      await refresh(true);
    } catch (err) {
      status.textContent = `not recorded: ${err.message}${err.hint ? ` (${err.hint})` : ""}`;
      status.classList.add("bad");
      sync();
    }
  };
  approve.addEventListener("click", () => send("approve"));
  reject.addEventListener("click", () => send("reject"));
  return h("div", { class: "gate-form" },
    h("label", {}, "Type ", h("code", { class: "gate-code" }, gate.code), " to confirm: ", code),
    note, h("div", { class: "buttons" }, approve, reject), status);
}

function gateCard(project, gate) {
  return h("article", { class: `card gate gate-${gate.status}`, "data-gate": gate.id },
    h("div", { class: "card-head" }, chip(gate.kind, "gate"), chip(gate.status),
      gate.approval ? chip(gate.approval === "once" ? "single use: the next turn may use it"
        : gate.approval === "used" ? "used" : "standing", `approval-${gate.approval}`) : null,
      h("span", { class: "muted small" }, gate.id)),
    h("p", { class: "question" }, gate.question),
    gate.context && gate.kind !== "promote" ? h("pre", { class: "context" }, gate.context) : null,
    h("p", { class: "meta" }, `asked by ${gate.requested_by || "?"} · ${when(gate.created)}`,
      gate.blocks && gate.blocks.length ? ` · blocks ${gate.blocks.join(", ")}` : " · blocks the whole goal"),
    gate.status === "pending" ? gateForm(project, gate)
      : h("p", { class: "meta" }, `${gate.status} by ${gate.decided_by}${gate.decided_on ? ` on ${gate.decided_on}` : ""} via ${gate.channel || "?"} · ${when(gate.decided)}`,
        gate.note ? ` · “${gate.note}”` : "",
        gate.used ? ` · used ${when(gate.used.ts)} by ${gate.used.by || "?"}` : ""));
}

function todoItem(t) {
  return h("li", { class: `todo todo-${t.status}` },
    h("span", { class: "todo-title" }, t.title),
    h("span", { class: "muted small" }, ` ${t.id}${t.priority ? ` · p${t.priority}` : ""}`),
    t.holder ? h("div", { class: "small" }, `held by ${t.holder}${t.machine ? "@" + t.machine : ""} · lease `, countdown(t.lease_until, "expired")) : null,
    t.note ? h("div", { class: "small muted" }, t.note) : null,
    (t.depends_on_goals || []).filter((g) => g.status !== "done").length
      ? h("div", { class: "small" }, "waits for goal ", (t.depends_on_goals || []).filter((g) => g.status !== "done")
        .map((g) => `${g.id} (${g.status || "unknown"})`).join(", "), " to be done") : null,
    t.evidence ? h("div", { class: "small muted" }, `${t.evidence} evidence`) : null);
}

function board(data) {
  return h("div", { class: "board" }, BOARD.map((st) => {
    const col = data.board[st] || { count: 0, items: [] };
    return h("div", { class: `column col-${st}` }, h("h3", {}, `${st} (${col.count})`),
      h("ul", {}, col.items.map(todoItem)),
      col.count > col.items.length ? h("p", { class: "muted small" }, `showing the last ${col.items.length}`) : null);
  }));
}

function chart(c) {
  const W = 600, H = 120, pad = 20;
  const max = Math.max(1, ...c.bins);
  const bw = (W - pad * 2) / c.bins.length;
  const svg = s("svg", { viewBox: `0 0 ${W} ${H + 24}`, class: "chart", role: "img",
    "aria-label": `${c.spent} of ${c.slots} slots used in the window` });
  svg.append(s("line", { x1: pad, y1: H, x2: W - pad, y2: H, class: "axis" }));
  c.bins.forEach((n, i) => {
    const bh = (n / max) * (H - 10);
    const bar = s("rect", { x: pad + i * bw + 1, y: H - bh, width: Math.max(1, bw - 2), height: bh, class: "bar" });
    bar.append(s("title", {}, `${n} slot(s)`));
    svg.append(bar);
  });
  if (!c.spent) svg.append(s("text", { x: W / 2, y: H / 2, class: "axis-label", "text-anchor": "middle" }, "no slots spent in this window"));
  svg.append(s("text", { x: pad, y: H + 18, class: "axis-label" }, when(c.start)),
    s("text", { x: W - pad, y: H + 18, class: "axis-label", "text-anchor": "end" }, "now"));
  return svg;
}

function runItem(r) {
  return h("li", { class: "run" },
    h("div", { class: "run-head" }, h("strong", {}, when(r.started)), " ", chip(r.result || "in progress", r.result || "running"),
      r.finished && (r.result === "progress" || r.result === "completion")
        ? (r.verified ? chip("verified", "ok") : chip("not verified", "muted")) : null,
      h("span", { class: "muted small" }, ` ${r.id} · ${r.agent || "?"}${r.machine ? ` on ${r.machine}` : ""} · ${r.mode || "work"} · ${r.slots} slot(s)`)),
    r.decision ? h("p", { class: "small" }, `last should-run decision: ${r.decision.decision} (${r.decision.reason || ""}) ${r.decision.message || ""}`) : null,
    r.todo_title ? h("p", { class: "small" }, "todo: ", r.todo_title) : null,
    r.finished ? h("p", { class: "small" }, usageText(r)) : null,
    r.setup_error ? h("p", { class: "small" }, chip(r.setup_error.reason, "warn"), " ", r.setup_error.message) : null,
    r.out_of_scope && r.out_of_scope.length ? h("p", { class: "small" }, chip("outside the scope", "warn"), " ",
      r.out_of_scope.join(", ")) : null,
    r.note ? h("p", { class: "small muted" }, r.note) : null,
    r.evidence.length ? h("ul", { class: "evidence" }, r.evidence.map(evidenceItem)) : null);
}

function usageText(r) {
  const u = r.usage;
  const parts = [];
  if (!u) parts.push("usage unknown");
  else {
    if (u.total_tokens !== null && u.total_tokens !== undefined) parts.push(`${u.total_tokens.toLocaleString()} tokens`);
    parts.push(u.cost_usd !== null && u.cost_usd !== undefined ? `${u.cost_usd.toFixed(2)} USD` : "cost unknown");
    if (u.model) parts.push(u.model);
  }
  const c = r.changes;
  if (c) parts.push(`${c.files} file(s) +${c.added}/-${c.removed}${c.commit_count ? `, ${c.commit_count} commit(s)` : ""}${c.committed ? "" : " (uncommitted)"}`);
  if (r.permission_mode) parts.push(`permissions ${r.permission_mode}`);
  return parts.join(" · ");
}

function evidenceItem(e) {
  return h("li", {}, chip(e.kind, "ev"), " ", h("span", { class: "ev-summary" }, e.summary),
    e.exit_code !== null && e.exit_code !== undefined ? h("span", { class: "muted small" }, ` exit ${e.exit_code}`) : null,
    h("span", { class: "muted small" }, ` ${e.id} · ${when(e.ts)}`));
}

function reviewSection(data) {
  const out = h("pre", { class: "review", hidden: "" });
  const btn = h("button", { type: "button" }, "Load the review packet");
  btn.addEventListener("click", async () => {
    btn.disabled = true;
    try {
      const r = await getJSON(`/api/review?project=${encodeURIComponent(data.project.key)}&goal=${encodeURIComponent(data.goal.id)}`);
      out.textContent = r.available ? r.markdown : r.message;
    } catch (err) {
      out.textContent = `could not load the review packet: ${err.message}`;
    }
    out.hidden = false;
    btn.disabled = false;
  });
  return h("section", {}, h("h2", {}, "Review packet"), btn, out);
}

// ---------------------------------------------------------------- research experiments (issue 20)
function fmtValue(v) {
  return v === null || v === undefined ? "—" : Number(v.toPrecision(6)).toString();
}

function fmtDelta(v) {
  return v === null || v === undefined ? "—" : (v >= 0 ? "+" : "") + Number(v.toPrecision(6)).toString();
}

function trialLabel(t, metric) {
  return `${t.id} (#${t.number}) ${t.decision} · ${metric} ${fmtValue(t.value)} · ${t.hypothesis || ""}`;
}

function experimentChart(x) {
  const W = 760, H = 300, L = 64, R = 16, T = 22, B = 44;
  const trials = x.trials;
  const metric = x.summary.metric;
  const vals = trials.map((t) => t.value).filter((v) => v !== null && v !== undefined);
  let lo = vals.length ? Math.min(...vals) : 0, hi = vals.length ? Math.max(...vals) : 1;
  if (hi === lo) { lo -= 0.5; hi += 0.5; }
  const span = hi - lo; lo -= span * 0.08; hi += span * 0.08;
  const n = trials.length ? trials[trials.length - 1].number : 1;
  const first = trials.length ? trials[0].number : 1;
  const X = (num) => L + (n === first ? (W - L - R) / 2 : ((num - first) / (n - first)) * (W - L - R));
  const Y = (v) => T + (1 - (v - lo) / (hi - lo)) * (H - T - B);
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "exp-chart", role: "img",
    "aria-label": `${metric} over ${trials.length} trials: kept, discarded and crashed trials, the frontier as a step line` });
  for (let i = 0; i <= 4; i++) {
    const v = lo + ((hi - lo) * i) / 4;
    svg.append(s("line", { x1: L, x2: W - R, y1: Y(v), y2: Y(v), class: "grid" }),
      s("text", { x: L - 6, y: Y(v) + 4, class: "axis-label", "text-anchor": "end" }, Number(v.toPrecision(3)).toString()));
  }
  svg.append(s("text", { x: L, y: H - 8, class: "axis-label" }, `trial ${first}`),
    s("text", { x: W - R, y: H - 8, class: "axis-label", "text-anchor": "end" }, `trial ${n}`),
    s("text", { x: L, y: T - 2, class: "axis-label" }, metric));
  // the frontier: a step line through the kept trials, held until the last trial
  const kept = trials.filter((t) => t.decision === "keep" && t.value !== null && t.value !== undefined);
  if (kept.length) {
    let d = `M ${X(kept[0].number)} ${Y(kept[0].value)}`;
    for (const t of kept.slice(1)) d += ` H ${X(t.number)} V ${Y(t.value)}`;
    d += ` H ${X(n)}`;
    svg.append(s("path", { d, class: "frontier" }));
  }
  const caption = h("p", { class: "exp-caption small", "aria-live": "polite" }, "Hover or focus a point to see its hypothesis.");
  const base = H - B + 10; // crashed and stale trials have no value: drawn on a row of their own
  for (const t of trials) {
    const has = t.value !== null && t.value !== undefined;
    const cx = X(t.number), cy = has ? Y(t.value) : base;
    const g = s("g", { class: `pt pt-${t.decision}`, tabindex: "0", "data-trial": t.id, "aria-label": trialLabel(t, metric) });
    g.append(s("title", {}, trialLabel(t, metric)));
    if (t.decision === "keep") g.append(s("circle", { cx, cy, r: 5.5 }));
    else if (t.decision === "discard") g.append(s("circle", { cx, cy, r: 4.5 }));
    else if (t.decision === "crash") g.append(s("path", { d: `M ${cx - 5} ${cy - 5} L ${cx + 5} ${cy + 5} M ${cx - 5} ${cy + 5} L ${cx + 5} ${cy - 5}` }));
    else g.append(s("rect", { x: cx - 4, y: cy - 4, width: 8, height: 8 }));
    const show = () => { caption.textContent = trialLabel(t, metric); };
    g.addEventListener("mouseenter", show);
    g.addEventListener("focus", show);
    svg.append(g);
  }
  const legend = h("p", { class: "exp-legend small" },
    h("span", { class: "key key-keep" }, "● kept"), " ", h("span", { class: "key key-discard" }, "○ discarded"), " ",
    h("span", { class: "key key-crash" }, "✕ crashed"), " ", h("span", { class: "key key-stale" }, "□ stale"), " ",
    h("span", { class: "key key-frontier" }, "— frontier"));
  return h("figure", { class: "exp-figure" }, svg, legend, caption);
}

function experimentTable(x) {
  const metric = x.summary.metric;
  const rows = x.trials.slice().reverse().map((t) => h("tr", { class: `trial-${t.decision}` },
    h("td", {}, String(t.number)), h("td", {}, h("code", {}, t.id)), h("td", {}, t.hypothesis || ""),
    h("td", {}, t.agent || ""),
    h("td", { class: "num" }, fmtValue(t.value), t.claims && Object.keys(t.claims).length
      ? h("span", { class: "muted small" }, ` (claimed ${Object.values(t.claims).map(fmtValue).join(", ")})`) : null),
    h("td", { class: "num" }, fmtDelta(t.delta)), h("td", {}, chip(t.decision, `d-${t.decision}`)),
    h("td", {}, h("code", {}, (t.commit || "").slice(0, 10)))));
  return h("div", { class: "table-wrap" }, h("table", { class: "trials" },
    h("thead", {}, h("tr", {}, ["#", "trial", "hypothesis", "agent", metric, "delta", "decision", "commit"].map((c) => h("th", {}, c)))),
    h("tbody", {}, rows)));
}

function holdoutText(hd) {
  if (!hd) return "holdout: none";
  if (hd.timed_out || hd.exit_code !== 0) return `holdout: the command failed (exit ${hd.exit_code})`;
  return "holdout (for you only): " + Object.entries(hd.metrics || {}).map(([k, v]) => `${k}=${fmtValue(v)}`).join(", ");
}

function experimentSection(data) {
  const x = data.experiment;
  const m = x.summary;
  const b = m.baseline || {}, f = m.frontier || {};
  const promote = x.promote.filter((g) => g.status === "pending");
  return h("section", { class: "experiment" }, h("h2", {}, `Experiment: ${m.metric} (${m.direction === "max" ? "higher" : "lower"} is better)`),
    h("p", {}, `baseline ${fmtValue(b.value)} → frontier ${fmtValue(f.value)} (${fmtDelta(m.total_improvement)}) · ${m.trials} trials: `,
      `${m.baseline ? "baseline, " : ""}${m.kept} kept, ${m.discarded} discarded, ${m.crashed} crashed${m.stale ? `, ${m.stale} stale` : ""} · ${m.since_improvement} since the last improvement`,
      m.plateau ? ` of ${m.plateau}` : "", m.plateaued ? " " : "", m.plateaued ? chip("plateau: a human decides", "warn") : null),
    h("div", { class: "exp-grid" }, experimentChart(x), experimentTable(x)),
    promote.length ? h("div", { class: "cards" }, promote.map((gate) => h("div", { class: "promote-card" },
      h("p", { class: "holdout" }, holdoutText(gate.holdout)), gateCard(data.project, gate)))) : null,
    x.promote.filter((g) => g.status !== "pending").map((g) => h("p", { class: "small muted" },
      `promotion ${g.id}: ${g.status} by ${g.decided_by || "?"} · ${holdoutText(g.holdout)}`)));
}

function goalPage(data) {
  const g = data.goal;
  const sum = data.summary;
  const pending = data.gates.filter((x) => x.status === "pending");
  const decided = data.gates.filter((x) => x.status !== "pending");
  const scope = g.scope || {};
  const list = (xs) => (xs && xs.length ? xs.join(", ") : "—");
  return h("div", { class: "page" },
    h("p", { class: "crumbs" }, h("a", { href: "#/" }, "Overview"), ` › ${data.project.name} › `, g.id),
    h("h1", { class: "goal-title" }, g.objective),
    h("p", {}, chip(g.status), " ", chip(sum.group.replace("_", " "), sum.group), " ", sum.reason,
      sum.next_check_at ? h("span", { class: "muted" }, " · next check ", countdown(sum.next_check_at, "due")) : null),
    pending.length ? h("p", { class: "next" }, "next: decide the gate below, or in a terminal: ", h("code", {}, `loopx gate approve ${pending[0].id}`))
      : sum.group === "waiting" && sum.next_check_at ? h("p", { class: "next" }, "next: nothing to do until the next check")
        : h("p", { class: "next" }, "next: ", h("code", {}, sum.next)),
    h("section", { class: "needs" }, h("h2", {}, `Waiting for you (${pending.length})`),
      pending.length ? h("div", { class: "cards" }, pending.map((gate) => gateCard(data.project, gate)))
        : h("p", { class: "muted" }, "No gate waits for a decision.")),
    data.experiment ? experimentSection(data) : null,
    h("section", {}, h("h2", {}, "Goal"), h("dl", { class: "facts" },
      h("dt", {}, "Done when"), h("dd", {}, g.done_when || "—"),
      h("dt", {}, "Verify"), h("dd", {}, g.verify ? h("code", {}, g.verify) : "—"),
      h("dt", {}, "Allowed paths"), h("dd", {}, list(scope.allow)),
      h("dt", {}, "Denied paths"), h("dd", {}, list(scope.deny)),
      h("dt", {}, "Protected actions"), h("dd", {}, list(scope.protect)),
      h("dt", {}, "Project"), h("dd", {}, data.project.path))),
    h("section", {}, h("h2", {}, "Todos"), board(data)),
    (data.watches || []).length ? h("section", { class: "watches" }, h("h2", {}, `Watches (${data.watches.length})`),
      h("table", {}, h("thead", {}, h("tr", {}, ["Watch", "Every", "On", "Last run", "Last result", "Next due", "Fired"].map((x) => h("th", {}, x)))),
        h("tbody", {}, data.watches.map((w) => h("tr", { "data-watch": w.id },
          h("td", {}, w.name, " ", h("code", { class: "small" }, w.check)), h("td", {}, span(w.every)), h("td", {}, w.on),
          h("td", {}, w.last_run ? when(w.last_run) : "never"),
          h("td", {}, w.outcome || "—", w.failing ? " (keeps erroring)" : "", w.error ? h("span", { class: "muted small" }, ` ${w.error}`) : null),
          h("td", {}, w.next_due ? countdown(w.next_due, "due") : w.status),
          h("td", {}, `${w.fired}×`)))))) : null,
    h("section", {}, h("h2", {}, "Budget"),
      h("p", {}, `${data.chart.spent} of ${data.chart.slots} slots used in the last ${span(data.chart.window)}`,
        g.quota && g.quota.cooldown ? ` · cooldown ${span(g.quota.cooldown)}` : ""), chart(data.chart)),
    h("section", {}, h("h2", {}, `Runs (${data.runs.length})`),
      data.runs.length ? h("ol", { class: "timeline" }, data.runs.map(runItem)) : h("p", { class: "muted" }, "No run yet.")),
    h("section", {}, h("h2", {}, "Recent evidence"),
      data.evidence.length ? h("ul", { class: "evidence" }, data.evidence.map(evidenceItem)) : h("p", { class: "muted" }, "No evidence yet.")),
    decided.length ? h("section", {}, h("h2", {}, "Decided gates"), h("div", { class: "cards" }, decided.map((gate) => gateCard(data.project, gate)))) : null,
    reviewSection(data));
}

// ---------------------------------------------------------------- agents
function agentsPage(data) {
  const root = h("div", { class: "page" }, h("h1", {}, "Agents"));
  if (!data.projects.length) root.append(h("p", { class: "muted" }, "No project is connected yet."));
  for (const p of data.projects) {
    const rows = p.agents.map((a) => h("tr", {},
      h("td", {}, a.name), h("td", {}, a.kind || "—"), h("td", {}, when(a.last_seen)),
      h("td", {}, a.holds.length ? h("ul", { class: "plain" }, a.holds.map((t) => h("li", {}, t.title, " ",
        h("span", { class: "muted small" }, `${t.id} · `), t.live ? ["lease ends ", countdown(t.lease_until, "expired")] : "lease expired"))) : "nothing")));
    root.append(h("section", {}, h("h2", {}, p.name),
      p.error ? h("p", { class: "warn" }, p.error) : null,
      rows.length ? h("table", {}, h("thead", {}, h("tr", {}, ["Agent", "Kind", "Last seen", "Holds"].map((x) => h("th", {}, x)))), h("tbody", {}, rows))
        : h("p", { class: "muted" }, "No agent has written to this project yet."),
      h("h3", {}, "Handoffs"),
      p.handoffs.length ? h("ul", { class: "plain" }, p.handoffs.map((x) => h("li", {},
        h("strong", {}, when(x.ts)), ` ${x.from || "?"} → ${x.to || "?"}`, x.todo ? ` (${x.todo})` : "", x.note ? `: ${x.note}` : "")))
        : h("p", { class: "muted" }, "No handoff recorded.")));
  }
  return root;
}

// ---------------------------------------------------------------- a trace file (loopx dashboard --trace)
// Read-only: no project, no decisions. The banner says which goal, when it was exported and whether
// the archive verified; gates show how they were decided, never a form.
function traceMode(t) {
  const banner = document.getElementById("trace-banner");
  const state = !t.checked ? "not verified (opened with --no-verify)" : t.verified ? "verified" : "does not verify";
  banner.textContent = `Read-only trace · goal ${t.goal_id}${t.objective ? `: ${t.objective}` : ""} · exported ${when(t.exported_at)} (${t.exported_at || "unknown"}) · ${state}`;
  banner.classList.toggle("unverified", !t.verified);
  banner.hidden = false;
  const nav = document.querySelector("header.top nav");
  if (nav) nav.hidden = true;
  document.title = `loopx trace · ${t.goal_id}`;
}

function traceGate(gate) {
  return h("article", { class: `card gate gate-${gate.status}`, "data-gate": gate.id },
    h("div", { class: "card-head" }, chip(gate.kind || "gate", "gate"), chip(gate.status),
      gate.used ? chip(`used ${gate.used}×`, "approval-used") : null, h("span", { class: "muted small" }, gate.id)),
    h("p", { class: "question" }, gate.question || ""),
    h("p", { class: "meta" }, `opened ${when(gate.opened)}`,
      gate.status === "pending" ? " · still pending when the trace was exported"
        : ` · ${gate.status} by ${gate.decided_by || "?"} via ${gate.channel || "?"} · ${when(gate.decided)}`,
      gate.note ? ` · “${gate.note}”` : ""));
}

function traceEntry(e) {
  return h("li", { class: `tl tl-${e.kind}`, "data-type": e.type },
    h("span", { class: "tl-when", title: e.ts || "" }, whenExact(e.ts)), chip(e.kind, `tl-${e.kind}`), " ",
    h("span", { class: "tl-text" }, e.text),
    h("span", { class: "muted small" }, ` · ${e.actor || "?"}`),
    e.redacted ? [" ", chip("redacted", "muted")] : null);
}

function tracePage(data) {
  const t = data.trace;
  const g = data.goal;
  const check = !t.checked ? "not verified: opened with --no-verify"
    : t.verified ? `verified: ${t.records} record(s), ${t.stubs} other record(s) as hashes, ${t.anchors} anchor(s)`
      : "does not verify";
  const out = h("pre", { class: "review", hidden: "" });
  const btn = h("button", { type: "button" }, "Show the review packet");
  btn.addEventListener("click", async () => {
    btn.disabled = true;
    try {
      const r = await getJSON("/api/review");
      out.textContent = r.available ? r.markdown : r.message;
    } catch (err) {
      out.textContent = `could not load the review packet: ${err.message}`;
    }
    out.hidden = false;
    btn.disabled = false;
  });
  return h("div", { class: "page trace-page" },
    h("h1", { class: "goal-title" }, g.objective || g.id),
    h("dl", { class: "facts" },
      h("dt", {}, "Goal"), h("dd", {}, g.id),
      h("dt", {}, "Done when"), h("dd", {}, g.done_when || "—"),
      h("dt", {}, "Status at export"), h("dd", {}, g.status ? chip(g.status) : "—"),
      h("dt", {}, "Exported"), h("dd", {}, t.exported_at || "—"),
      h("dt", {}, "File"), h("dd", {}, t.file),
      h("dt", {}, "Verification"), h("dd", {}, check),
      h("dt", {}, "Redaction"), h("dd", {}, t.redact_more
        ? `redacted more for publishing (${(t.redact_more.rules || []).join(", ")}): ${t.redact_more.records} record(s) are checked by their original hashes only`
        : "as recorded (secrets were redacted when written)")),
    t.problems.length ? h("ul", { class: "warn" }, t.problems.slice(0, 20).map((p) => h("li", {}, p))) : null,
    h("p", { class: "muted" }, "This page shows a trace file: nothing here can be decided or changed."),
    h("section", {}, h("h2", {}, `Gates (${data.gates.length})`),
      data.gates.length ? h("div", { class: "cards" }, data.gates.map(traceGate)) : h("p", { class: "muted" }, "No gate was opened.")),
    h("section", {}, h("h2", {}, `Timeline (${data.total} record${data.total === 1 ? "" : "s"})`),
      data.shown < data.total ? h("p", { class: "muted" }, `showing the first ${data.shown}`) : null,
      h("ol", { class: "trace-timeline" }, data.entries.map(traceEntry))),
    h("section", {}, h("h2", {}, "Review packet"), btn, out));
}

// ---------------------------------------------------------------- notifications
// Each notice (a gate opened, a goal stalled or finished, the budget ran out) is shown once as a
// system notification while this page is open and permission was granted. Seen ids are kept in
// localStorage; on the first visit everything already there counts as seen (no flood).
const SEEN_KEY = "loopx.notices.seen";

function notifyButton() {
  const nav = document.querySelector("header.top nav");
  if (!nav || !("Notification" in window) || document.getElementById("notify-btn")) return;
  if (Notification.permission !== "default") return;
  const btn = h("button", { id: "notify-btn", type: "button", class: "notify-btn" }, "Enable notifications");
  btn.addEventListener("click", async () => {
    try { await Notification.requestPermission(); } catch (err) { /* the browser refused to ask */ }
    if (Notification.permission !== "default") btn.remove();
  });
  nav.append(btn);
}

function showNotice(n) {
  const opts = { body: `${n.project}: ${n.body}`, tag: n.id, icon: "/icon-192.png" };
  try {
    new Notification(n.title, opts);
  } catch (err) {  // some browsers only allow notifications through the service worker
    if (navigator.serviceWorker) navigator.serviceWorker.ready.then((reg) => reg.showNotification(n.title, opts)).catch(() => {});
  }
}

async function pollNotices() {
  if (!("Notification" in window) || !session.csrf || session.trace) return;
  let data;
  try { data = await getJSON("/api/notices"); } catch (err) { return; }
  let seen = null;
  try { seen = JSON.parse(localStorage.getItem(SEEN_KEY) || "null"); } catch (err) { seen = null; }
  const first = !Array.isArray(seen);
  const known = new Set(first ? [] : seen);
  for (const n of data.notices.slice().reverse()) {
    if (known.has(n.id)) continue;
    known.add(n.id);
    if (!first && Notification.permission === "granted") showNotice(n);
  }
  try { localStorage.setItem(SEEN_KEY, JSON.stringify([...known].slice(-400))); } catch (err) { /* storage full or off */ }
}

// ---------------------------------------------------------------- start
function schedule() {
  clearTimeout(view.timer);
  view.timer = setTimeout(async () => {
    // a hidden tab polls nothing (each poll costs the server a look at every store); on its return
    // it refreshes and fetches the notices it missed at once
    if (!document.hidden) {
      await refresh(false);
      await pollNotices();
    }
    schedule();
  }, POLL_MS);
}

window.addEventListener("hashchange", () => { view.lastText = null; refresh(true); });
document.addEventListener("visibilitychange", () => {
  if (!document.hidden) { refresh(false); pollNotices(); }
});
setInterval(tick, 1000);
if ("serviceWorker" in navigator) navigator.serviceWorker.register("/sw.js").catch(() => {});
notifyButton();
refresh(true).then(pollNotices);
schedule();
