// HTML for the console: every value that came from the database, NATS or the request passes
// `esc`, which leaves no markup in it and shows control characters as visible escapes.

const ENTITIES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;', '`': '&#96;' };

/**
 * C0 and C1 controls (but tab and newline), bidirectional overrides and isolates, line and
 * paragraph separators: each shown as a visible `\uXXXX`, so a key cannot hide or reorder text.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: we are finding control characters to show them
const CONTROLS = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]/g;

/** Any value as inert HTML text. */
export function esc(value: unknown): string {
  const s = value === null || value === undefined ? '' : typeof value === 'string' ? value : String(value);
  return s
    .replace(/[&<>"'`]/g, (c) => ENTITIES[c] as string)
    .replace(CONTROLS, (c) => `<span class="ctl">\\u${(c.codePointAt(0) ?? 0).toString(16).padStart(4, '0')}</span>`);
}

/** Already-escaped HTML, so it is not escaped twice. */
export class Html {
  constructor(readonly value: string) {}
  toString(): string {
    return this.value;
  }
}

/** A tagged template: interpolated values are escaped unless they are `Html`; arrays are joined. */
export function html(strings: TemplateStringsArray, ...values: unknown[]): Html {
  let out = strings[0] ?? '';
  values.forEach((v, i) => {
    out += piece(v) + (strings[i + 1] ?? '');
  });
  return new Html(out);
}

function piece(v: unknown): string {
  if (v instanceof Html) return v.value;
  if (Array.isArray(v)) return v.map(piece).join('');
  if (v === false || v === null || v === undefined) return '';
  return esc(v);
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
