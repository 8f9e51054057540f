// main.js - the console page: login, the lists (contexts, processes, pool,
// kernelspecs, refreshed every 2 s), context actions (a fork among them), a
// code cell per context with the context's checkpoints under it, and a
// process's live log. Everything the page shows is built
// with DOM calls and text nodes (the page's CSP requires Trusted Types and
// allows none, so a string can never become markup here).

import { ApiError, call, createCheckpoint, deleteCheckpoint, events, forgetToken, forkContext,
  listCheckpoints, restoreCheckpoint, setUnauthorizedHandler, storeToken, storedToken }
  from "./api.js";
import { RunView } from "./render.js";
import { ansiFragment } from "./ansi.js";

const REFRESH_MS = 2000;
const MAX_PROCESSES = 40;
const DEFAULT_CELL = ""; // the cell that runs in the default python context

const $ = (id) => document.getElementById(id);

const state = {
  loggedIn: false,
  timer: null,
  refreshing: false,
  contexts: new Map(), // context_id -> context JSON
  contextRows: new Map(), // context_id -> <tr>
  processRows: new Map(), // process_id -> <tr>
  selected: DEFAULT_CELL, // the context of the visible cell
  cells: new Map(), // context id -> {code, output, view, controller}
  log: { controller: null, processId: null },
  defaultLanguage: "python",
  forkable: new Map(), // kernelspec name -> its `fork` of GET /kernelspecs
  checkpoints: { contextId: null, rows: new Map(), loading: false, again: false }, // the selected context's
};

// ---- Small helpers ---------------------------------------------------------

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = text;
  return node;
}

function button(label, testid, onClick, className = "small") {
  const b = el("button", className, label);
  b.type = "button";
  b.dataset.testid = testid;
  b.addEventListener("click", (event) => {
    event.stopPropagation();
    onClick(b);
  });
  return b;
}

function showError(id, message) {
  const node = $(id);
  node.textContent = message || "";
  node.hidden = !message;
}

function describe(error) {
  if (error instanceof ApiError) return `${error.code || error.status}: ${error.message}`;
  return error && error.message ? error.message : String(error);
}

function bytes(n) {
  if (typeof n !== "number") return "–";
  if (n < 1024) return `${n} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(1)} ${units[i]}`;
}

function ago(iso) {
  const t = Date.parse(iso);
  if (!Number.isFinite(t)) return "–";
  const s = Math.max(0, Math.round((Date.now() - t) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return new Date(t).toLocaleString();
}

function clock(iso) {
  const t = Date.parse(iso);
  return Number.isFinite(t) ? new Date(t).toLocaleTimeString([], { hour12: false }) : "–";
}

function stateBadge(value) {
  return el("span", `state state-${value}`, value);
}

// Set a cell's text only when it changed (the lists redraw every 2 s).
function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

// ---- Login ------------------------------------------------------------------

function showLogin(message) {
  state.loggedIn = false;
  clearInterval(state.timer);
  state.timer = null;
  stopLog();
  for (const cell of state.cells.values()) if (cell.controller) cell.controller.abort();
  $("app").hidden = true;
  $("logout-button").hidden = true;
  $("login").hidden = false;
  setText($("daemon-info"), "");
  showError("login-error", message);
  $("token-input").focus();
}

// Check a token with a call that needs it, then keep it for this tab.
async function login(token) {
  showError("login-error", null);
  $("login-button").disabled = true;
  let specs;
  try {
    specs = await call("GET", "/kernelspecs", undefined, { token });
  } catch (error) {
    forgetToken();
    if (error instanceof ApiError && error.status === 401)
      showLogin("Wrong token: the daemon answered 401 Unauthorized. Check the token and try again.");
    else showLogin(`Cannot reach the daemon: ${describe(error)}`);
    return;
  } finally {
    $("login-button").disabled = false;
  }
  storeToken(token);
  $("token-input").value = "";
  enterApp(specs);
}

setUnauthorizedHandler(() => {
  if (!state.loggedIn) return;
  forgetToken();
  showLogin("The daemon refused the token (401 Unauthorized): log in again.");
});

function enterApp(specs) {
  state.loggedIn = true;
  $("login").hidden = true;
  $("app").hidden = false;
  $("logout-button").hidden = false;
  showKernelspecs(specs);
  showCell(state.selected);
  refresh();
  state.timer = setInterval(() => {
    if (!document.hidden) refresh();
  }, REFRESH_MS);
}

// ---- Kernelspecs, languages, pool --------------------------------------------

function showKernelspecs(body) {
  const specs = (body && body.kernelspecs) || [];
  const list = $("kernelspecs");
  list.replaceChildren(...specs.map((spec) => {
    const li = el("li");
    li.append(el("span", "mono", spec.name), ` — ${spec.display_name} · ${spec.language}` +
              (spec.fork === true ? " · can fork" : ""));
    return li;
  }));
  state.forkable = new Map(specs.map((spec) => [spec.name, spec.fork === true]));
  const byDefault = specs.find((spec) => spec.name === body.default);
  if (byDefault) state.defaultLanguage = byDefault.language;

  const select = $("new-context-language");
  const languages = [...new Set(specs.map((spec) => spec.language))].sort();
  const options = languages.map((language) => {
    const option = el("option", null, language);
    option.value = language;
    return option;
  });
  const group = el("optgroup");
  group.label = "kernelspec";
  for (const spec of specs) {
    const option = el("option", null, spec.name);
    option.value = `kernel:${spec.name}`;
    group.append(option);
  }
  select.replaceChildren(...options, group);
  select.value = state.defaultLanguage;
  showCellContexts();
}

function showPool(health) {
  setText($("daemon-info"),
          `${health.sandbox_id} · v${health.version} · ${health.contexts} context(s)`);
  const pool = health.pool || {};
  const items = Object.keys(pool).sort().map((language) => {
    const p = pool[language];
    return el("li", null, `${language} (${p.kernel_name}): ${p.ready} ready, ${p.starting} ` +
                          `starting, target ${p.target}${p.failures ? `, ${p.failures} failed` : ""}`);
  });
  if (items.length === 0) items.push(el("li", "muted", "no pool (--pool python=N starts one)"));
  $("pool").replaceChildren(...items);
}

// ---- Contexts ------------------------------------------------------------------

function contextRow(id) {
  const tr = el("tr", "clickable");
  tr.dataset.testid = "context-row";
  tr.dataset.contextId = id;
  const cells = {
    id: el("td", "mono ctx-id", id),
    language: el("td", "ctx-language"),
    state: el("td", "ctx-state"),
    generation: el("td", "ctx-generation"),
    memory: el("td", "ctx-memory"),
    activity: el("td", "ctx-activity"),
    actions: el("td", "actions"),
  };
  cells.actions.append(
    button("Use", "context-use", () => selectContext(id)),
    button("Restart", "context-restart", (b) => contextAction(b, "restart", id)),
    button("Interrupt", "context-interrupt", (b) => contextAction(b, "interrupt", id)),
    button("Fork", "context-fork", (b) => forkFrom(b, id)),
    button("Delete", "context-delete", (b) => contextAction(b, "delete", id), "small danger"),
  );
  tr.append(...Object.values(cells));
  tr.addEventListener("click", () => selectContext(id));
  tr.cells_ = cells;
  return tr;
}

function updateContextRow(tr, ctx) {
  const c = tr.cells_;
  setText(c.language, ctx.language);
  if (c.state.textContent !== ctx.state) c.state.replaceChildren(stateBadge(ctx.state));
  setText(c.generation, String(ctx.generation));
  setText(c.memory, bytes(ctx.resources && ctx.resources.memory_bytes));
  setText(c.activity, ago(ctx.last_activity_at));
  c.activity.title = ctx.last_activity_at || "";
  tr.dataset.state = ctx.state;
  tr.dataset.generation = String(ctx.generation);
  // Default contexts cannot be deleted (they can be restarted).
  tr.querySelector('[data-testid="context-delete"]').hidden = Boolean(ctx.default);
  // Only a kernel that can fork (ipykernel) shows Fork.
  tr.querySelector('[data-testid="context-fork"]').hidden = !canFork(ctx);
  const origin = ctx.forked_from ? ctx.forked_from.context_id : "";
  tr.dataset.forkedFrom = origin;
  c.id.title = origin ? `forked from ${origin} at execution ${ctx.forked_from.execution_count}` : "";
  tr.classList.toggle("selected", state.selected === ctx.context_id);
}

function showContexts(list) {
  const tbody = $("context-list");
  const seen = new Set();
  state.contexts = new Map(list.map((ctx) => [ctx.context_id, ctx]));
  for (const ctx of list) {
    seen.add(ctx.context_id);
    let tr = state.contextRows.get(ctx.context_id);
    if (!tr) {
      tr = contextRow(ctx.context_id);
      state.contextRows.set(ctx.context_id, tr);
    }
    updateContextRow(tr, ctx);
  }
  for (const [id, tr] of state.contextRows) {
    if (!seen.has(id)) {
      tr.remove();
      state.contextRows.delete(id);
    }
  }
  // Order as the daemon lists them; nodes move only when out of place.
  let previous = null;
  for (const ctx of list) {
    const tr = state.contextRows.get(ctx.context_id);
    const expected = previous ? previous.nextSibling : tbody.firstChild;
    if (expected !== tr) tbody.insertBefore(tr, expected);
    previous = tr;
  }
  const empty = tbody.querySelector("tr.empty-row");
  if (list.length === 0 && !empty) {
    const tr = el("tr", "empty-row");
    const td = el("td", "empty", "no contexts yet");
    td.colSpan = 7;
    tr.append(td);
    tbody.append(tr);
  } else if (list.length > 0 && empty) {
    empty.remove();
  }
  if (state.selected !== DEFAULT_CELL && !state.contexts.has(state.selected))
    setText($("cell-status"), "(this context is gone)");
  showCellContexts();
}

async function contextAction(b, action, id) {
  showError("context-error", null);
  b.disabled = true;
  const path = `/contexts/${encodeURIComponent(id)}`;
  try {
    if (action === "delete") {
      await call("DELETE", path);
      const cell = state.cells.get(id);
      if (cell && cell.controller) cell.controller.abort();
      state.cells.delete(id);
      if (state.selected === id) selectContext(DEFAULT_CELL);
    } else if (action === "restart") {
      await call("POST", `${path}/restart`);
    } else {
      await call("POST", `${path}/interrupt`);
    }
  } catch (error) {
    showError("context-error", `${action} ${id}: ${describe(error)}`);
  } finally {
    b.disabled = false;
  }
  refresh();
}

function canFork(ctx) {
  return Boolean(ctx) && state.forkable.get(ctx.kernel_name) === true;
}

// Fork a context; the new one is selected for the code cell.
async function forkFrom(b, id) {
  showError("context-error", null);
  b.disabled = true;
  try {
    const answer = await forkContext(id);
    const made = (answer && answer.contexts) || [];
    await refresh();
    if (made.length > 0) selectContext(made[0].context_id);
  } catch (error) {
    showError("context-error", `fork ${id}: ${describe(error)}`);
  } finally {
    b.disabled = false;
  }
}

async function createContext(event) {
  event.preventDefault();
  showError("context-error", null);
  const choice = $("new-context-language").value;
  const body = choice.startsWith("kernel:") ? { kernel_name: choice.slice(7) } : { language: choice };
  const id = $("new-context-id").value.trim();
  if (id) body.context_id = id;
  const b = $("new-context-button");
  b.disabled = true;
  setText(b, "Starting…");
  try {
    const ctx = await call("POST", "/contexts", body);
    $("new-context-id").value = "";
    await refresh();
    selectContext(ctx.context_id);
  } catch (error) {
    showError("context-error", `new context: ${describe(error)}`);
  } finally {
    b.disabled = false;
    setText(b, "New context");
  }
}

// ---- The code cell (one per context) -------------------------------------------

function cellFor(id) {
  let cell = state.cells.get(id);
  if (!cell) {
    cell = { code: "", output: el("div", "cell-output"), view: null, controller: null };
    state.cells.set(id, cell);
  }
  return cell;
}

function showCellContexts() {
  const select = $("cell-context");
  const ids = [DEFAULT_CELL, ...state.contexts.keys()];
  if (state.selected !== DEFAULT_CELL && !ids.includes(state.selected)) ids.push(state.selected);
  const current = [...select.options].map((o) => o.value);
  if (current.join("\n") !== ids.join("\n")) {
    select.replaceChildren(...ids.map((id) => {
      const option = el("option", null, id || `default ${state.defaultLanguage} context`);
      option.value = id;
      return option;
    }));
  }
  select.value = state.selected;
}

function showCell(id) {
  const cell = cellFor(id);
  $("code-input").value = cell.code;
  $("output").replaceChildren(cell.output);
  const running = Boolean(cell.controller);
  $("run-button").disabled = running;
  setText($("cell-status"), running ? "running…" : "");
}

function selectContext(id) {
  if (id === state.selected) return;
  cellFor(state.selected).code = $("code-input").value;
  state.selected = id;
  for (const [rowId, tr] of state.contextRows) tr.classList.toggle("selected", rowId === id);
  showCellContexts();
  showCell(id);
  showCheckpoints();
}

async function runCell() {
  const id = state.selected;
  const cell = cellFor(id);
  if (cell.controller) return;
  const code = $("code-input").value;
  cell.code = code;
  cell.output.replaceChildren();
  const view = new RunView(cell.output);
  cell.view = view;
  cell.controller = new AbortController();
  if (state.selected === id) showCell(id);
  const body = id === DEFAULT_CELL ? { code, language: state.defaultLanguage }
                                   : { code, context_id: id };
  try {
    for await (const event of events("POST", "/run", body, { signal: cell.controller.signal }))
      view.onEvent(event);
    if (!view.ended) view.fail("the stream ended before the run's result");
  } catch (error) {
    if (error.name === "AbortError") view.fail("stopped following this run (it goes on)");
    else view.fail(describe(error));
  } finally {
    cell.controller = null;
    if (state.selected === id) showCell(id);
    refresh();
  }
}

async function interruptCell() {
  const cell = cellFor(state.selected);
  const id = state.selected || (cell.view && cell.view.contextId);
  if (!id) return;
  try {
    await call("POST", `/contexts/${encodeURIComponent(id)}/interrupt`);
  } catch (error) {
    showError("context-error", `interrupt ${id}: ${describe(error)}`);
  }
}

function onCodeKey(event) {
  if (event.key === "Enter" && event.shiftKey) {
    event.preventDefault();
    runCell();
  } else if (event.key === "Tab" && !event.shiftKey && !event.ctrlKey && !event.altKey) {
    event.preventDefault();
    const area = event.target;
    area.setRangeText("    ", area.selectionStart, area.selectionEnd, "end");
  }
}

// ---- Checkpoints of the selected context ------------------------------------------

function checkpointRow(contextId, cp) {
  const tr = el("tr");
  tr.dataset.testid = "checkpoint-row";
  tr.dataset.checkpointId = cp.checkpoint_id;
  const cells = {
    id: el("td", "mono cp-id", cp.checkpoint_id),
    count: el("td", "cp-count", String(cp.execution_count)),
    memory: el("td", "cp-memory"),
    created: el("td", "cp-created"),
    actions: el("td", "actions"),
  };
  cells.actions.append(
    button("Restore", "checkpoint-restore", (b) => checkpointAction(b, "restore", contextId, cp)),
    button("Delete", "checkpoint-delete", (b) => checkpointAction(b, "delete", contextId, cp),
           "small danger"),
  );
  tr.append(...Object.values(cells));
  tr.cells_ = cells;
  return tr;
}

// Show the checkpoints of the cell's context (rows kept by id, as the
// lists are, so that a click never lands on a row just replaced).
function showCheckpointRows(contextId, list) {
  const tbody = $("checkpoint-list");
  const rows = state.checkpoints.rows;
  const seen = new Set(list.map((cp) => cp.checkpoint_id));
  for (const [id, tr] of rows) {
    if (!seen.has(id)) {
      tr.remove();
      rows.delete(id);
    }
  }
  for (const cp of list) {
    let tr = rows.get(cp.checkpoint_id);
    if (!tr) {
      tr = checkpointRow(contextId, cp);
      rows.set(cp.checkpoint_id, tr);
    }
    setText(tr.cells_.memory, bytes(cp.memory_bytes));
    setText(tr.cells_.created, ago(cp.created_at));
    tr.cells_.created.title = cp.created_at || "";
    tbody.append(tr); // oldest first, as the daemon lists them
  }
}

// The checkpoint card for state.selected: its list, or why there is none.
async function showCheckpoints() {
  const id = state.selected;
  const ctx = state.contexts.get(id);
  const card = state.checkpoints;
  if (card.contextId !== id) {
    card.contextId = id;
    card.rows = new Map();
    $("checkpoint-list").replaceChildren();
    setText($("checkpoint-status"), "");
    showError("checkpoint-error", null);
  }
  let why = null;
  if (id === DEFAULT_CELL) why = "pick a context to checkpoint it";
  else if (ctx && !canFork(ctx)) why = `${id}: its kernel (${ctx.kernel_name}) cannot fork`;
  $("checkpoint-button").disabled = why !== null;
  $("checkpoints").dataset.contextId = why === null ? id : "";
  if (why !== null) {
    setText($("checkpoint-title"), why);
    return;
  }
  setText($("checkpoint-title"), `of ${id}`);
  if (card.loading) {
    card.again = true; // what is being read may be older than what was asked for
    return;
  }
  card.loading = true;
  try {
    const list = await listCheckpoints(id);
    if (state.selected === id) showCheckpointRows(id, list);
  } catch (error) {
    if (state.selected === id) showError("checkpoint-error", `checkpoints of ${id}: ${describe(error)}`);
  } finally {
    card.loading = false;
  }
  if (card.again) {
    card.again = false;
    await showCheckpoints();
  }
}

async function checkpointAction(b, action, contextId, cp) {
  showError("checkpoint-error", null);
  b.disabled = true;
  try {
    if (action === "create") {
      const made = await createCheckpoint(contextId);
      setText($("checkpoint-status"), `${made.checkpoint_id} made at execution ${made.execution_count}`);
    } else if (action === "restore") {
      const ctx = await restoreCheckpoint(contextId, cp.checkpoint_id);
      setText($("checkpoint-status"),
              `${contextId} restored from ${cp.checkpoint_id}: generation ${ctx.generation}`);
    } else {
      await deleteCheckpoint(contextId, cp.checkpoint_id);
      setText($("checkpoint-status"), `${cp.checkpoint_id} deleted`);
    }
  } catch (error) {
    const what = cp ? `${action} ${cp.checkpoint_id}` : "checkpoint";
    showError("checkpoint-error", `${what} of ${contextId}: ${describe(error)}`);
  } finally {
    b.disabled = false;
  }
  await refresh();
  await showCheckpoints();
}

// ---- Processes and their live logs -------------------------------------------------

function processRow(id) {
  const tr = el("tr", "clickable");
  tr.dataset.testid = "process-row";
  tr.dataset.processId = id;
  const cells = {
    id: el("td", "proc-id"),
    state: el("td", "proc-state"),
    reason: el("td", "proc-reason"),
    started: el("td", "proc-started"),
    actions: el("td", "actions"),
  };
  cells.context = el("div", "muted proc-context");
  cells.id.append(el("div", "mono", id), cells.context);
  cells.actions.append(button("Log", "process-log-button", () => followLog(id)));
  tr.append(...Object.values(cells).filter((node) => node.tagName === "TD"));
  tr.addEventListener("click", () => followLog(id));
  tr.cells_ = cells;
  return tr;
}

function showProcesses(list) {
  const tbody = $("process-list");
  const shown = [...list]
    .sort((a, b) => String(b.started_at).localeCompare(String(a.started_at)))
    .slice(0, MAX_PROCESSES);
  const seen = new Set(shown.map((p) => p.process_id));
  for (const [id, tr] of state.processRows) {
    if (!seen.has(id)) {
      tr.remove();
      state.processRows.delete(id);
    }
  }
  let previous = null;
  for (const p of shown) {
    let tr = state.processRows.get(p.process_id);
    if (!tr) {
      tr = processRow(p.process_id);
      state.processRows.set(p.process_id, tr);
    }
    const c = tr.cells_;
    setText(c.context, p.context_id || "(isolated)");
    if (c.state.textContent !== p.state) c.state.replaceChildren(stateBadge(p.state));
    const reason = p.state === "running" ? "" :
      [p.reason, p.exit_code !== null ? p.exit_code : p.signal].filter((v) => v !== null && v !== undefined).join(" ");
    setText(c.reason, reason);
    setText(c.started, clock(p.started_at));
    tr.dataset.state = p.state;
    tr.classList.toggle("selected", state.log.processId === p.process_id);
    const expected = previous ? previous.nextSibling : tbody.firstChild;
    if (expected !== tr) tbody.insertBefore(tr, expected);
    previous = tr;
  }
}

function stopLog() {
  if (state.log.controller) state.log.controller.abort();
  state.log.controller = null;
}

// Follow a process's log frames as they come (GET .../logs?follow=true).
async function followLog(id) {
  stopLog();
  const controller = new AbortController();
  state.log = { controller, processId: id };
  for (const [rowId, tr] of state.processRows) tr.classList.toggle("selected", rowId === id);
  const pre = $("process-log");
  pre.replaceChildren();
  pre.dataset.processId = id;
  pre.dataset.state = "following";
  setText($("process-log-title"), `${id} (following)`);
  try {
    const path = `/processes/${encodeURIComponent(id)}/logs?follow=true`;
    for await (const event of events("GET", path, undefined, { signal: controller.signal })) {
      if (event.event === "log") {
        const span = el("span", `ch-${event.data.channel}`);
        span.append(ansiFragment(event.data.data));
        pre.append(span);
        pre.scrollTop = pre.scrollHeight;
      } else if (event.event === "eof") {
        pre.dataset.state = "ended";
        setText($("process-log-title"), `${id} (ended)`);
      }
    }
  } catch (error) {
    if (error.name !== "AbortError") {
      pre.dataset.state = "failed";
      setText($("process-log-title"), `${id}: ${describe(error)}`);
    }
  }
}

// ---- Refresh ----------------------------------------------------------------------------

async function refresh() {
  if (!state.loggedIn || state.refreshing) return;
  state.refreshing = true;
  try {
    // Each list on its own: one that fails leaves the others shown.
    const [contexts, processes, health] = await Promise.allSettled([
      call("GET", "/contexts?all=true"),
      call("GET", "/processes"),
      call("GET", "/health"),
    ]);
    if (!state.loggedIn) return;
    if (contexts.status === "fulfilled") showContexts(contexts.value.contexts || []);
    if (processes.status === "fulfilled") showProcesses(processes.value.processes || []);
    if (health.status === "fulfilled") showPool(health.value);
    showCheckpoints();
    const failed = [contexts, processes, health].find((r) => r.status === "rejected");
    if (failed && !(failed.reason instanceof ApiError && failed.reason.status === 401))
      setText($("daemon-info"), `cannot refresh: ${describe(failed.reason)}`);
  } finally {
    state.refreshing = false;
  }
}

// ---- Start ------------------------------------------------------------------------------

function start() {
  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    login($("token-input").value.trim());
  });
  $("logout-button").addEventListener("click", () => {
    forgetToken();
    showLogin(null);
  });
  $("new-context-form").addEventListener("submit", createContext);
  $("cell-context").addEventListener("change", (event) => selectContext(event.target.value));
  $("run-button").addEventListener("click", runCell);
  $("interrupt-button").addEventListener("click", interruptCell);
  $("checkpoint-button").addEventListener("click", (event) =>
    checkpointAction(event.currentTarget, "create", state.selected, null));
  $("clear-button").addEventListener("click", () => cellFor(state.selected).output.replaceChildren());
  $("code-input").addEventListener("keydown", onCodeKey);
  const token = storedToken();
  if (token !== null) login(token);
  else showLogin(null);
}

start();
