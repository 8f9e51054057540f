// api.js - the daemon's HTTP API (SPEC section 5) as the console calls it:
// JSON requests and Server-Sent Events read from fetch streams (EventSource
// cannot send a header). The token lives in this tab's sessionStorage and
// goes out only as an Authorization header, never in a URL. The calls of
// forks and checkpoints have their own functions at the end.

const TOKEN_KEY = "kernelbridge.token";

// The stored token: a string ("" when the daemon needs none), or null when
// nobody has logged in in this tab.
export function storedToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function storeToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}

export function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

// An answer that is not a success: status and our JSON error body
// {code, message, ...} when there was one.
export class ApiError extends Error {
  constructor(status, body, fallback) {
    const message = body && typeof body.message === "string" ? body.message : fallback;
    super(message || `HTTP ${status}`);
    this.name = "ApiError";
    this.status = status;
    this.code = body && typeof body.code === "string" ? body.code : null;
  }
}

// Called with the ApiError of any 401, so that the page can go back to
// its login form.
let onUnauthorized = () => {};
export function setUnauthorizedHandler(handler) {
  onUnauthorized = handler;
}

function headers(accept, token, hasBody) {
  const h = new Headers({ Accept: accept });
  if (token) h.set("Authorization", `Bearer ${token}`);
  if (hasBody) h.set("Content-Type", "application/json");
  return h;
}

async function send(method, path, body, accept, options = {}) {
  const token = options.token !== undefined ? options.token : storedToken();
  const hasBody = body !== undefined;
  return fetch(path, {
    method,
    headers: headers(accept, token, hasBody),
    body: hasBody ? JSON.stringify(body) : undefined,
    signal: options.signal,
    cache: "no-store",
    credentials: "omit",
    redirect: "error",
    referrerPolicy: "no-referrer",
  });
}

async function failure(response) {
  let body = null;
  try {
    body = await response.json();
  } catch (e) {
    body = null;
  }
  const error = new ApiError(response.status, body, response.statusText);
  if (response.status === 401) onUnauthorized(error);
  return error;
}

// One JSON call: the decoded answer (null for 202/204); throws ApiError.
// options.token overrides the stored token (the login check).
export async function call(method, path, body, options) {
  const response = await send(method, path, body, "application/json", options);
  if (!response.ok) throw await failure(response);
  if (response.status === 204 || response.status === 202) return null;
  const text = await response.text();
  return text ? JSON.parse(text) : null;
}

// An event stream: yields {event, data, id} for each event (data decoded
// from JSON), until the server ends it or signal aborts it. Errors found
// before the stream starts are thrown as ApiError.
export async function* events(method, path, body, options = {}) {
  const response = await send(method, path, body, "text/event-stream", options);
  if (!response.ok) throw await failure(response);
  const type = response.headers.get("Content-Type") || "";
  if (!type.startsWith("text/event-stream"))
    throw new ApiError(response.status, null, `expected an event stream, got ${type}`);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let event = null;
  let data = [];
  let id = null;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let newline;
      while ((newline = buffer.search(/\r\n|\r|\n/)) >= 0) {
        if (newline === buffer.length - 1 && buffer.endsWith("\r")) break; // "\r\n" split?
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + (buffer.startsWith("\r\n", newline) ? 2 : 1));
        if (line === "") {
          if (data.length > 0) {
            const raw = data.join("\n");
            yield { event: event || "message", data: JSON.parse(raw), id };
          }
          event = null;
          data = [];
          id = null;
        } else if (line.startsWith(":")) {
          // a keep-alive comment
        } else {
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          let value = colon < 0 ? "" : line.slice(colon + 1);
          if (value.startsWith(" ")) value = value.slice(1);
          if (field === "event") event = value;
          else if (field === "data") data.push(value);
          else if (field === "id") id = value;
        }
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

// ---- Forks and checkpoints (SPEC section 13) ----------------------------------

export function contextPath(id) {
  return `/contexts/${encodeURIComponent(id)}`;
}

// Fork a context: {contexts: [context, ...]} (body: {count?, context_ids?, ...}).
export function forkContext(id, body = {}) {
  return call("POST", `${contextPath(id)}/fork`, body);
}

// A context's checkpoints, oldest first.
export async function listCheckpoints(id) {
  const answer = await call("GET", `${contextPath(id)}/checkpoints`);
  return (answer && answer.checkpoints) || [];
}

// Checkpoint a context: {checkpoint_id, context_id, execution_count, created_at, memory_bytes}.
export function createCheckpoint(id) {
  return call("POST", `${contextPath(id)}/checkpoints`, {});
}

export function deleteCheckpoint(id, checkpointId) {
  return call("DELETE", `${contextPath(id)}/checkpoints/${encodeURIComponent(checkpointId)}`);
}

// Put a context back to one of its checkpoints: the context (generation + 1, restored_from).
export function restoreCheckpoint(id, checkpointId) {
  return call("POST", `${contextPath(id)}/restore`, { checkpoint_id: checkpointId });
}
