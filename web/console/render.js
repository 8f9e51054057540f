// render.js - one run's outputs as DOM, event by event from POST /run's
// stream (SPEC section 5): stdout and stderr as they come, rich outputs
// from MIME bundles, errors with their ANSI colours, the result's line.
//
// What kernel output may become:
//   text/html      an <iframe sandbox="allow-scripts"> WITHOUT
//                  allow-same-origin, loading /console/frame.html (served
//                  with its own CSP: connect-src 'none', sandbox) and handed
//                  the HTML by postMessage. Its scripts run in an opaque
//                  origin: no access to this page, its storage or the
//                  daemon. (A srcdoc or blob: frame would inherit this
//                  page's CSP in Chromium and run none of them.)
//   image/svg+xml  an <img> of a data: URL (an image runs no script), never
//                  SVG markup in the page;
//   image/png ...  an <img> of a data: URL;
//   JSON           pretty-printed text;
//   anything else  text nodes (ansi.js), never markup.

import { AnsiWriter, ansiFragment } from "./ansi.js";

// The HTML each output frame is to be given, until it asks (frame.html
// says "ready" when it has loaded, again after each reload).
const frameHtml = new WeakMap();
const MAX_FRAME_HEIGHT = 1600;

function frameOf(source) {
  for (const frame of document.querySelectorAll("iframe.out-html"))
    if (frame.contentWindow === source) return frame;
  return null;
}

// Messages from output frames: "ready" (send the HTML) and "height". A
// frame is answered only by its own window, with its own HTML.
window.addEventListener("message", (event) => {
  const frame = frameOf(event.source);
  if (!frame || !event.data || typeof event.data !== "object") return;
  if (event.data.kb === "ready" && frameHtml.has(frame)) {
    event.source.postMessage({ kb: "html", html: frameHtml.get(frame) }, "*");
  } else if (event.data.kb === "height" && Number.isFinite(event.data.height)) {
    const height = Math.max(24, Math.min(MAX_FRAME_HEIGHT, Math.ceil(event.data.height) + 4));
    frame.style.height = `${height}px`;
  }
});

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function joined(value) {
  return Array.isArray(value) ? value.join("") : String(value);
}

function htmlFrame(html) {
  const frame = el("iframe", "out out-html");
  // allow-scripts without allow-same-origin: an opaque origin.
  frame.setAttribute("sandbox", "allow-scripts");
  frame.setAttribute("referrerpolicy", "no-referrer");
  frame.title = "HTML output (sandboxed)";
  frameHtml.set(frame, joined(html));
  frame.src = "/console/frame.html";
  return frame;
}

function image(type, base64, className) {
  const data = joined(base64).replace(/\s+/g, "");
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(data))
    return el("pre", "out out-system", `(${type} output that is not base64)`);
  const img = el("img", `out ${className}`);
  img.alt = type;
  img.src = `data:${type};base64,${data}`;
  return img;
}

function svgImage(svg) {
  const img = el("img", "out out-svg");
  img.alt = "image/svg+xml";
  img.src = `data:image/svg+xml;charset=utf-8,${encodeURIComponent(joined(svg))}`;
  return img;
}

function textBlock(className, text) {
  const pre = el("pre", `out ${className}`);
  pre.append(ansiFragment(text));
  return pre;
}

// One MIME bundle as one element: the richest type this page renders.
export function renderBundle(data) {
  if (!data || typeof data !== "object") return textBlock("out-text", String(data));
  if ("text/html" in data) return htmlFrame(data["text/html"]);
  if ("image/png" in data) return image("image/png", data["image/png"], "out-png");
  if ("image/jpeg" in data) return image("image/jpeg", data["image/jpeg"], "out-jpeg");
  if ("image/gif" in data) return image("image/gif", data["image/gif"], "out-gif");
  if ("image/svg+xml" in data) return svgImage(data["image/svg+xml"]);
  if ("application/json" in data) {
    let text;
    try {
      text = JSON.stringify(data["application/json"], null, 2);
    } catch (e) {
      text = String(data["application/json"]);
    }
    return el("pre", "out out-json", text);
  }
  for (const type of ["text/markdown", "text/latex", "text/plain"])
    if (type in data) return textBlock(type === "text/plain" ? "out-text" : "out-source", joined(data[type]));
  const types = Object.keys(data);
  return el("pre", "out out-system", `(no renderer for ${types.join(", ") || "an empty bundle"})`);
}

function errorBlock(error) {
  const lines = Array.isArray(error.traceback) && error.traceback.length > 0
    ? error.traceback.join("\n")
    : `${error.name || "Error"}: ${error.value || ""}`;
  const pre = textBlock("out-error", lines);
  pre.dataset.errorName = error.name || "";
  return pre;
}

function seconds(value) {
  return typeof value === "number" ? `${value.toFixed(value < 10 ? 2 : 1)} s` : "";
}

// The outputs of one run, built as its events arrive.
export class RunView {
  constructor(container) {
    this.root = el("div", "run");
    this.head = el("div", "run-head", "running…");
    this.root.append(this.head);
    this.items = el("div", "run-items output-items");
    this.root.append(this.items);
    this.lastStream = null; // {channel, pre, writer}
    this.clearPending = false;
    this.sawError = false;
    this.ended = false;
    this.processId = null;
    this.contextId = null;
    container.append(this.root);
  }

  add(node) {
    if (this.clearPending) {
      this.clearPending = false;
      this.clear();
    }
    this.items.append(node);
    return node;
  }

  clear() {
    this.items.replaceChildren();
    this.lastStream = null;
  }

  stream(channel, text) {
    if (this.clearPending) {
      this.clearPending = false;
      this.clear();
    }
    if (!this.lastStream || this.lastStream.channel !== channel ||
        this.items.lastChild !== this.lastStream.pre) {
      const pre = this.add(el("pre", `out out-stream out-${channel}`));
      this.lastStream = { channel, pre, writer: new AnsiWriter() };
    }
    this.lastStream.pre.append(this.lastStream.writer.write(text));
  }

  display(entry) {
    const node = renderBundle(entry.data);
    if (entry.is_main_result) node.classList.add("out-result");
    if (entry.display_id) node.dataset.displayId = entry.display_id;
    this.lastStream = null;
    this.add(node);
  }

  update(displayId, data) {
    for (const old of this.items.querySelectorAll("[data-display-id]")) {
      if (old.dataset.displayId !== displayId) continue;
      const node = renderBundle(data);
      node.dataset.displayId = displayId;
      if (old.classList.contains("out-result")) node.classList.add("out-result");
      old.replaceWith(node);
    }
  }

  // One event of the run's stream.
  onEvent({ event, data }) {
    switch (event) {
      case "start":
        this.processId = data.process_id;
        this.contextId = data.context && data.context.context_id;
        this.head.textContent = `${this.processId} in ${this.contextId} (generation ${
          data.context ? data.context.generation : "?"})`;
        break;
      case "stdout":
      case "stderr":
        this.stream(event, data.text || "");
        break;
      case "system":
        this.lastStream = null;
        this.add(el("pre", "out out-system", data.text || ""));
        break;
      case "display":
        this.display(data);
        break;
      case "display_update":
        this.update(data.display_id, data.data);
        break;
      case "clear_output":
        if (data.wait) this.clearPending = true;
        else this.clear();
        break;
      case "error":
        this.sawError = true;
        this.lastStream = null;
        this.add(errorBlock(data));
        break;
      case "result":
        this.end(data);
        break;
      default:
        break;
    }
  }

  // The run's last event: its result. An error that came with no error
  // event (a timeout, a dead kernel) is shown from the result.
  end(result) {
    this.ended = true;
    if (result.error && !this.sawError) this.add(errorBlock(result.error));
    const p = result.process || {};
    const parts = [p.reason || "ended"];
    if (p.exit_code !== null && p.exit_code !== undefined) parts.push(`exit ${p.exit_code}`);
    if (p.signal) parts.push(p.signal);
    if (p.raw_reason) parts.push(p.raw_reason);
    if (result.execution_count) parts.push(`[${result.execution_count}]`);
    if (result.resources) parts.push(seconds(result.resources.wall_time_s));
    if (result.truncated) parts.push("output truncated");
    const line = el("div", "run-end", parts.filter(Boolean).join(" · "));
    line.dataset.testid = "run-end";
    line.dataset.reason = p.reason || "";
    if (p.exit_code !== 0) line.classList.add("failed");
    this.root.append(line);
  }

  // The run could not start, or its stream broke.
  fail(message) {
    this.ended = true;
    const line = el("div", "run-end failed", message);
    line.dataset.testid = "run-end";
    line.dataset.reason = "client-error";
    this.root.append(line);
  }
}
