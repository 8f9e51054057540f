// ansi.js - ANSI escape sequences in kernel text (tracebacks, coloured
// prints) to DOM nodes: SGR colours and styles become <span>s with classes
// (ansi-fg-N / ansi-bg-N for the 16 classic colours, console.css), 256-colour
// and true-colour values a class plus a CSSOM colour. Every other escape
// sequence and control character is dropped. Text only ever becomes text
// nodes: kernel text is never parsed as markup.

// CSI (ESC [ params final), OSC (ESC ] ... BEL or ST), other two-byte escapes.
const ESCAPE = /\x1b\[([0-9;:?]*)([@-~])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]?/g;
// C0 controls other than tab and newline, and DEL.
const CONTROL = /[\x00-\x08\x0b-\x1f\x7f]/g;

function freshStyle() {
  return { bold: false, dim: false, italic: false, underline: false, inverse: false,
           fg: null, bg: null };
}

// The rgb() of a 256-colour index from 16 up (the xterm cube and grey ramp).
function xtermRgb(n) {
  if (n >= 232) {
    const v = 8 + 10 * (n - 232);
    return [v, v, v];
  }
  const c = n - 16;
  const level = (v) => (v === 0 ? 0 : 55 + 40 * v);
  return [level(Math.floor(c / 36)), level(Math.floor(c / 6) % 6), level(c % 6)];
}

// Read a colour after 38/48 at params[i]: returns [colour, next index].
function extendedColour(params, i) {
  if (params[i] === 5 && i + 1 < params.length) {
    const n = params[i + 1];
    if (n >= 0 && n <= 255)
      return [n < 16 ? { index: n } : { rgb: xtermRgb(n) }, i + 2];
    return [null, i + 2];
  }
  if (params[i] === 2 && i + 3 < params.length) {
    const rgb = params.slice(i + 1, i + 4).map((v) => Math.max(0, Math.min(255, v)));
    return [{ rgb }, i + 4];
  }
  return [null, params.length];
}

// Apply one SGR sequence's parameters to style (in place).
function applySgr(style, text) {
  const params = text === "" ? [0] : text.split(/[;:]/).map((p) => (p === "" ? 0 : Number(p)));
  for (let i = 0; i < params.length; ) {
    const p = params[i++];
    if (p === 0) Object.assign(style, freshStyle());
    else if (p === 1) style.bold = true;
    else if (p === 2) style.dim = true;
    else if (p === 3) style.italic = true;
    else if (p === 4) style.underline = true;
    else if (p === 7) style.inverse = true;
    else if (p === 22) style.bold = style.dim = false;
    else if (p === 23) style.italic = false;
    else if (p === 24) style.underline = false;
    else if (p === 27) style.inverse = false;
    else if (p >= 30 && p <= 37) style.fg = { index: p - 30 };
    else if (p === 39) style.fg = null;
    else if (p >= 40 && p <= 47) style.bg = { index: p - 40 };
    else if (p === 49) style.bg = null;
    else if (p >= 90 && p <= 97) style.fg = { index: p - 90 + 8 };
    else if (p >= 100 && p <= 107) style.bg = { index: p - 100 + 8 };
    else if (p === 38 || p === 48) {
      const [colour, next] = extendedColour(params, i);
      i = next;
      if (colour) style[p === 38 ? "fg" : "bg"] = colour;
    }
  }
}

function isPlain(style) {
  return !style.bold && !style.dim && !style.italic && !style.underline && !style.inverse &&
         !style.fg && !style.bg;
}

function paint(span, colour, which) {
  if (!colour) return;
  if ("index" in colour) {
    span.classList.add(`ansi-${which}-${colour.index}`);
  } else {
    span.classList.add(`ansi-${which}-rgb`);
    const value = `rgb(${colour.rgb.join(", ")})`;
    if (which === "fg") span.style.color = value;
    else span.style.backgroundColor = value;
  }
}

function styledNode(text, style) {
  if (isPlain(style)) return document.createTextNode(text);
  const span = document.createElement("span");
  span.classList.add("ansi");
  if (style.bold) span.classList.add("ansi-bold");
  if (style.dim) span.classList.add("ansi-dim");
  if (style.italic) span.classList.add("ansi-italic");
  if (style.underline) span.classList.add("ansi-underline");
  const fg = style.inverse ? style.bg || { index: 15 } : style.fg;
  const bg = style.inverse ? style.fg || { index: 0 } : style.bg;
  paint(span, fg, "fg");
  paint(span, bg, "bg");
  span.textContent = text;
  return span;
}

function clean(text) {
  return text.replace(/\r\n/g, "\n").replace(CONTROL, "");
}

// A renderer that keeps its style across calls, for text that comes in
// pieces (a stream): write(text) returns a DocumentFragment to append.
export class AnsiWriter {
  constructor() {
    this.style = freshStyle();
  }

  write(text) {
    const fragment = document.createDocumentFragment();
    let last = 0;
    ESCAPE.lastIndex = 0;
    for (let m; (m = ESCAPE.exec(text)) !== null; ) {
      if (m.index > last) {
        const piece = clean(text.slice(last, m.index));
        if (piece) fragment.append(styledNode(piece, this.style));
      }
      if (m[2] === "m") applySgr(this.style, m[1]);
      last = ESCAPE.lastIndex;
      if (m[0] === "") ESCAPE.lastIndex++; // never loop on an empty match
    }
    const rest = clean(text.slice(last));
    if (rest) fragment.append(styledNode(rest, this.style));
    return fragment;
  }
}

// Text with ANSI escapes as a DocumentFragment of text nodes and spans.
export function ansiFragment(text) {
  return new AnsiWriter().write(String(text));
}

// Text without any escape sequence or control character.
export function stripAnsi(text) {
  return clean(String(text).replace(ESCAPE, ""));
}
