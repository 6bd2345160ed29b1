import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isValidationError } from '@ferry/core';
import { esc, escAttr, Html, hiddenField, html, readForm } from './html.js';

// Text and attribute contexts are escaped apart: text shows control characters as decorated
// escapes, an attribute value keeps the exact characters (and never gets markup), so a form posts
// the exact value it was given.

/** Characters a stored key, type, subject or reason may hold (the validators refuse only C0 and DEL in keys). */
const HOSTILE = [
  'victim\u0085key', // C1 NEL
  'a\u0080\u009fb', // the C1 range's ends
  'line\u2028sep',
  'para\u2029sep',
  'bidi\u202ekey\u202c',
  'iso\u2066late\u2069',
  'bom\ufeffkey',
  'cr\rreason',
  'lf\nreason',
  'crlf\r\nreason',
  `quote" onmouseover="x' <b>&amp;\``,
];

/** What an HTML parser makes of a double-quoted attribute value this module writes. */
function parseAttr(raw: string): string {
  assert.doesNotMatch(raw, /["<>]/, 'no raw quote or angle bracket in an attribute value');
  return raw
    .replace(/\r\n?/g, '\n') // the parser's input stream preprocessing
    .replace(/&(amp|lt|gt|quot);|&#(\d+);/g, (_, name: string | undefined, n: string | undefined) =>
      name ? (({ amp: '&', lt: '<', gt: '>', quot: '"' } as Record<string, string>)[name] ?? '') : String.fromCodePoint(Number(n)),
    );
}

test('html - an attribute value keeps every character exactly and gets no markup', () => {
  for (const v of HOSTILE) {
    const out = escAttr(v);
    assert.doesNotMatch(out, /<span/);
    assert.equal(parseAttr(out), v, JSON.stringify(v));
  }
  // C1 controls stay raw: &#133; would be read as U+2026 (the Windows-1252 mapping of 128-159).
  assert.equal(escAttr('a\u0085b'), 'a\u0085b');
});

test('html - text shows control characters as visible escapes', () => {
  assert.equal(esc('victim\u0085key'), 'victim<span class="ctl">\\u0085</span>key');
  assert.equal(esc('bidi\u202e'), 'bidi<span class="ctl">\\u202e</span>');
  assert.equal(esc('a\r'), 'a<span class="ctl">\\u000d</span>');
});

test('html - the template escapes each value for where it lands', () => {
  const key = 'victim\u0085key';
  const out = html`<tr data-key="${key}"><td>${key}</td><td><a href="/events?key=${key}" class="k${new Html(' bad')}">${key}</a></td><title>${key}</title><input value="${key}${key}"></tr>`;
  assert.equal(
    out.value,
    '<tr data-key="victim\u0085key"><td>victim<span class="ctl">\\u0085</span>key</td><td><a href="/events?key=victim\u0085key" class="k bad">victim<span class="ctl">\\u0085</span>key</a></td><title>victim\\u0085key</title><input value="victim\u0085keyvictim\u0085key"></tr>',
  );
  // A value in a nested template or an array takes its own template's place.
  const rows = html`<ul>${[1, 2].map(() => html`<li data-v="${'a\u2028'}">${'a\u2028'}</li>`)}</ul>`;
  assert.equal(
    rows.value,
    '<ul><li data-v="a\u2028">a<span class="ctl">\\u2028</span></li><li data-v="a\u2028">a<span class="ctl">\\u2028</span></li></ul>',
  );
  assert.throws(() => html`<a href=${'/x'}>`, /interpolated inside <a> but not in a quoted attribute value/);
  assert.equal(html`<td${''}>`.value, '<td>');
});

test('html - a hidden field posts the exact value, CR and LF included, through a browser newline normalization', () => {
  for (const v of HOSTILE) {
    const field = hiddenField('reason', v).value;
    const m = /^<input type="hidden" name="([^"]*)" value="([^"]*)">$/.exec(field);
    assert.ok(m, field);
    // What a browser posts: the parsed value, its CR and LF normalized to CRLF, form-urlencoded.
    const posted = parseAttr(m[2] as string).replace(/\r\n|\r|\n/g, '\r\n');
    const body = new URLSearchParams([[m[1] as string, posted]]).toString();
    assert.equal(readForm(body).get('reason'), v, JSON.stringify(v));
  }
  assert.equal(hiddenField('key', 'plain').value, '<input type="hidden" name="key" value="plain">');
  assert.deepEqual(
    [...readForm('id=1&reason%3Ajson=%22a%5Cr%22&id=2')],
    [
      ['id', '1'],
      ['reason', 'a\r'],
      ['id', '2'],
    ],
  );
  assert.throws(
    () => readForm('reason%3Ajson=not-json'),
    (e) => isValidationError(e) && /reason:json must be a JSON string/.test((e as Error).message),
  );
});
