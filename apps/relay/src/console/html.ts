// HTML for the console: every value that came from the database, NATS or the request is escaped for
// the place it lands. Text (`esc`) shows control characters as visible escapes, in markup; an
// attribute value (`escAttr`) gets no markup at all and keeps every character, so a form posts the
// exact value it was given. The `html` template picks the one its position needs.

import { describeValue, ValidationError } from '@ferry/core';

const ENTITIES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;', '`': '&#96;' };

/**
 * C0 and C1 controls (but tab and newline), bidirectional overrides and isolates, line and
 * paragraph separators: each shown as a visible `\uXXXX`, so a key cannot hide or reorder text.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: we are finding control characters to show them
const CONTROLS = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]/g;

const asString = (value: unknown): string =>
  value === null || value === undefined ? '' : typeof value === 'string' ? value : String(value);
const codePoint = (c: string) => `\\u${(c.codePointAt(0) ?? 0).toString(16).padStart(4, '0')}`;

/** Any value as inert HTML text, control characters shown as `\uXXXX` in a `<span class="ctl">`. Never inside an attribute. */
export function esc(value: unknown): string {
  return asString(value)
    .replace(/[&<>"'`]/g, (c) => ENTITIES[c] as string)
    .replace(CONTROLS, (c) => `<span class="ctl">${codePoint(c)}</span>`);
}

/**
 * Any value for a double-quoted attribute (`value="…"`, `href="…"`, `data-key="…"`): & < > " ' and
 * the backtick as entities, CR and LF as character references (the parser would turn a raw CR into
 * LF), every other character as itself. C1 controls stay raw: `&#133;` would read as "…"
 * (the parser maps 128-159 to Windows-1252). No markup, so the DOM holds the exact value.
 */
export function escAttr(value: unknown): string {
  return asString(value)
    .replace(/[&<>"'`]/g, (c) => ENTITIES[c] as string)
    .replace(/[\r\n]/g, (c) => (c === '\r' ? '&#13;' : '&#10;'));
}

/** Text where markup is not parsed (`<title>`, `<textarea>`): escaped, controls shown as plain `\uXXXX`. */
function escRawText(value: unknown): string {
  return asString(value)
    .replace(/[&<>"'`]/g, (c) => ENTITIES[c] as string)
    .replace(CONTROLS, codePoint);
}

/** Already-escaped HTML, so it is not escaped twice. */
export class Html {
  constructor(readonly value: string) {}
  toString(): string {
    return this.value;
  }
}

/**
 * A tagged template: interpolated values are escaped unless they are `Html`; arrays are joined. The
 * template's own text says where each value lands: inside a double-quoted attribute value it gets
 * `escAttr`, inside `<title>` or `<textarea>` plain escapes, elsewhere `esc`. A non-empty string
 * between a tag's attributes (`<a href=${x}>`, unquoted) is a bug in the page and throws.
 * `Html` values are trusted to be whole markup (balanced quotes and tags) for the place they go.
 */
export function html(strings: TemplateStringsArray, ...values: unknown[]): Html {
  const at = places(strings);
  let out = strings[0] ?? '';
  values.forEach((v, i) => {
    out += piece(v, at[i] ?? TEXT) + (strings[i + 1] ?? '');
  });
  return new Html(out);
}

/** Per template (its strings are one frozen array per call site): where each value lands, scanned once. */
const PLACES = new WeakMap<TemplateStringsArray, Where[]>();
function places(strings: TemplateStringsArray): Where[] {
  let at = PLACES.get(strings);
  if (at === undefined) {
    at = [];
    let where = TEXT;
    for (let i = 0; i < strings.length - 1; i++) {
      where = scan(strings[i] ?? '', where);
      at.push(where);
    }
    PLACES.set(strings, at);
  }
  return at;
}

/** Where the template is: in text, inside a tag (between attributes), in a double-quoted attribute value, or in `<title>`/`<textarea>` text. */
interface Where {
  in: 'text' | 'tag' | 'attr' | 'raw';
  /** The tag being read, or whose raw text this is. */
  tag: string;
}
const TEXT: Where = { in: 'text', tag: '' };
const RAW_TEXT = new Set(['title', 'textarea']);

function scan(s: string, from: Where): Where {
  let w = from.in;
  let tag = from.tag;
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (w === 'text') {
      const name = c === '<' ? /^<([A-Za-z][A-Za-z0-9-]*)/.exec(s.slice(i, i + 40))?.[1] : undefined;
      if (name !== undefined) {
        w = 'tag';
        tag = name.toLowerCase();
        i += name.length;
      }
    } else if (w === 'tag') {
      if (c === '"') w = 'attr';
      else if (c === '>') w = RAW_TEXT.has(tag) ? 'raw' : 'text';
    } else if (w === 'attr') {
      if (c === '"') w = 'tag';
    } else if (c === '<' && s.slice(i + 2, i + 2 + tag.length).toLowerCase() === tag && s[i + 1] === '/') {
      w = 'text';
    }
  }
  return { in: w, tag };
}

function piece(v: unknown, at: Where): string {
  if (v instanceof Html) return v.value;
  if (Array.isArray(v)) return v.map((x) => piece(x, at)).join('');
  if (v === false || v === null || v === undefined) return '';
  switch (at.in) {
    case 'attr':
      return escAttr(v);
    case 'raw':
      return escRawText(v);
    case 'tag':
      if (v === '') return '';
      throw new Error(`html: ${describeValue(v)} interpolated inside <${at.tag}> but not in a quoted attribute value`);
    default:
      return esc(v);
  }
}

/** What a hidden field's name ends with when its value travels as a JSON string (`hiddenField`). */
const JSON_FIELD = ':json';

/**
 * A hidden form field that posts `value` exactly. A browser turns every CR and LF of a form value
 * into CRLF when it submits (HTML's newline normalization), so a value with either travels as a JSON
 * string in a field named `name:json`; `readForm` turns it back. Any other value is sent as itself.
 */
export function hiddenField(name: string, value: string): Html {
  return /[\r\n]/.test(value)
    ? html`<input type="hidden" name="${name}${JSON_FIELD}" value="${JSON.stringify(value)}">`
    : html`<input type="hidden" name="${name}" value="${value}">`;
}

/** A posted form's fields, `hiddenField`'s `name:json` ones decoded back to `name`, in their order. */
export function readForm(body: string): URLSearchParams {
  const form = new URLSearchParams();
  for (const [name, value] of new URLSearchParams(body)) {
    if (!name.endsWith(JSON_FIELD)) {
      form.append(name, value);
      continue;
    }
    let decoded: unknown;
    try {
      decoded = JSON.parse(value);
    } catch {
      decoded = undefined;
    }
    if (typeof decoded !== 'string')
      throw new ValidationError(
        name,
        `form field ${name} must be a JSON string (as the console writes it), got ${describeValue(value, 60)}`,
      );
    form.append(name.slice(0, -JSON_FIELD.length), decoded);
  }
  return form;
}

/** A query string from fields, leaving out empty ones. */
export function qs(fields: Record<string, string | number | undefined | null>): string {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(fields)) if (v !== undefined && v !== null && v !== '') p.set(k, String(v));
  const s = p.toString();
  return s ? `?${s}` : '';
}

/** Bytes as a hex dump, 16 per line with offsets. */
export function hexDump(b: Buffer): string {
  const lines: string[] = [];
  for (let i = 0; i < b.length; i += 16) {
    const row = b.subarray(i, i + 16);
    const hex = [...row].map((x) => x.toString(16).padStart(2, '0')).join(' ');
    const ascii = [...row].map((x) => (x >= 0x20 && x < 0x7f ? String.fromCharCode(x) : '.')).join('');
    lines.push(`${i.toString(16).padStart(8, '0')}  ${hex.padEnd(47)}  ${ascii}`);
  }
  return lines.join('\n');
}

/** A payload for display: pretty JSON, UTF-8 text, or (bytes that are not valid UTF-8) a hex dump. */
export function showPayload(data: Buffer, contentType: string): { kind: 'json' | 'text' | 'hex'; text: string } {
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(data);
  } catch {
    return { kind: 'hex', text: hexDump(data) };
  }
  if (/json/i.test(contentType) || /^\s*[[{]/.test(text)) {
    try {
      return { kind: 'json', text: JSON.stringify(JSON.parse(text), null, 2) };
    } catch {
      // Not JSON after all (or cut at the size bound): shown as text.
    }
  }
  return { kind: 'text', text };
}

export function ago(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined) return '-';
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 120) return `${seconds.toFixed(1)} s`;
  if (seconds < 7200) return `${(seconds / 60).toFixed(1)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

export const iso = (d: Date | string | null | undefined): string => (d instanceof Date ? d.toISOString() : (d ?? '-'));
