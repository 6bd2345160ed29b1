import { type EventFilter, parseFilter } from '../actions/event-filter.js';
import { type FailedAction, previewFailed, SelectionChangedError, settleFailed } from '../actions/failed.js';
import { type RetryHazards, retryHazards } from '../actions/retry-hazards.js';
import { parseDigest } from '../actions/selection.js';
import { type Html, hiddenField, html, qs } from './html.js';
import { type ConsoleContext, HttpError, type PageModule, type Req } from './page-kit.js';

// POST /dlq/preview and /dlq/apply: retry or discard failed outbox rows, after a preview.
export function dlqPages(c: ConsoleContext): PageModule {
  const { o, longPool, changed } = c;
  const { layout, csrfField, canAct, checkAction, eventLink, filterFields } = c.kit;

  function formFilter(form: URLSearchParams): EventFilter {
    const f = parseFilter(
      Object.fromEntries(['key', 'subject', 'type', 'since', 'until', 'state', 'reason'].map((k) => [k, form.get(k) ?? ''])),
    );
    const ids = form.getAll('id').filter(Boolean);
    if (ids.length > 0) f.ids = ids.map((id) => parseFilter({ id }).ids?.[0] as string);
    return f;
  }

  const failedAction = (form: URLSearchParams): FailedAction => {
    const a = form.get('action');
    if (a !== 'retry' && a !== 'discard') throw new HttpError(400, `action must be retry or discard, got ${JSON.stringify(a)}`);
    return a;
  };

  async function dlqPreview(r: Req, form: URLSearchParams): Promise<string> {
    checkAction(r, form);
    return dlqPreviewPage(r, failedAction(form), formFilter(form));
  }

  /** The preview of a dlq action, and its confirmation form carrying the exact selection; `refused` says why a confirmation was not done. */
  async function dlqPreviewPage(r: Req, action: FailedAction, f: EventFilter, refused?: string): Promise<string> {
    const p = await previewFailed(longPool, o.schema, f);
    // The CLI's `dlq retry --dry-run` runs this same check: the two previews cannot disagree.
    const checks = action === 'retry' && p.rows > 0 ? await retryHazards(longPool, o.schema, f, o.nc) : undefined;
    const what = f.key !== undefined && p.keys <= 1 ? html` of key <b>${f.key}</b>` : html` of ${p.keys} key(s)`;
    const verb = action === 'retry' ? 'retries' : 'discards';
    const kind =
      p.backingOff === 0
        ? 'dead event(s)'
        : p.dead === 0
          ? 'backing-off event(s)'
          : `failed event(s) (${p.dead} dead, ${p.backingOff} backing off)`;
    const flow = action === 'retry' ? 'row(s) behind them flow once they are published.' : 'row(s) behind them will flow.';
    const hidden = Object.entries({ ...filterFields(f), state: f.state })
      .filter(([k, v]) => v !== undefined && k !== 'id')
      .map(([k, v]) => hiddenField(k, v as string));
    const ids = (f.ids ?? []).map((id) => html`<input type="hidden" name="id" value="${id}">`);
    const notice = refused
      ? html`<p class="advice" id="error">${refused}</p><p class="note" id="changed">The selection changed since your preview: nothing was done. This is the new preview.</p>`
      : '';
    const body =
      p.rows === 0
        ? html`${notice}<p class="note">No failed event (dead or backing off) matches: nothing to ${action}.</p><p><a href="/blocked">Back</a></p>`
        : html`${notice}<div class="preview"><p id="summary">This ${verb} <b id="count">${p.rows}</b> ${kind}${what}; ${p.behindKeys < p.keys ? 'at least ' : ''}<b id="behind">${p.behind}</b> ${flow}${p.behindKeys < p.keys ? ` (counted behind the first ${p.behindKeys} keys)` : ''}</p>
${
  p.backingOff === 0
    ? ''
    : action === 'discard'
      ? html`<p class="note">A backing-off event may be on the wire right now: a discard keeps it from being sent again, but one already sent may still reach the stream (before any later event of its key).</p>`
      : html`<p class="note">A backing-off event may be on the wire right now: the retry sends it again at once, and the stream drops the second copy inside its duplicate window.</p>`
}${checks ? retryChecksHtml(r, checks) : ''}
<p class="note">Filter: <span class="mono">${JSON.stringify({ ...filterFields(f), state: f.state, ids: f.ids })}</span>. Only these ${p.selection.rows} rows change: if the selection differs when you confirm, nothing is done.</p>
<form method="post" action="/dlq/apply">${csrfField(r)}<input type="hidden" name="action" value="${action}">${hidden}${ids}
<input type="hidden" name="expect_rows" value="${p.selection.rows}"><input type="hidden" name="expect_digest" value="${p.selection.digest}">
<button id="confirm" class="danger" type="submit">${action === 'retry' ? 'Retry' : 'Discard'} ${p.selection.rows} event(s)</button> <a href="/blocked">Cancel</a></form></div>
<h2>The first ${p.sample.length}</h2><table><tr><th>id</th><th>key</th><th>version</th><th>subject</th><th>type</th><th>last error</th></tr>${p.sample.map(
            (e) =>
              html`<tr><td>${eventLink(e.id)}</td><td>${e.key}</td><td class="n">${e.version}</td><td>${e.subject}</td><td>${e.type}</td><td>${e.last_error ?? ''}</td></tr>`,
          )}</table>`;
    return layout(r, `Preview: ${action} failed events`, '/blocked', body);
  }

  /** What the retried events would run into again, each with its fix; or that NATS was not asked. */
  function retryChecksHtml(r: Req, c: RetryHazards): Html {
    const notAsked =
      c.subjects === null
        ? html`<p class="note" id="not-checked">Subjects and sizes not checked against NATS: ${o.natsError ?? 'not connected (ferry console --nats-url)'}.</p>`
        : '';
    if (c.hazards.length === 0)
      return html`${notAsked}<p class="note" id="checks-ok">${c.subjects === null ? 'No reserved subject.' : `Every subject is bound to a stream, and every event fits the server's max_payload (${c.maxPayload ?? '?'} bytes).`}</p>`;
    return html`${notAsked}<div class="advice" id="hazards"><p><b>${c.wouldFailAgain}</b> event(s) would fail again:</p><ul>${c.hazards.map(
      (h) =>
        html`<li data-hazard="${h.kind}">${h.message}. Fix: <span class="mono">${h.fix}</span>${
          h.kind === 'unbound-subject' && canAct(r)
            ? html` (or <a href="/streams${qs({ subject: h.subjects[0] })}">add it on the Streams page</a>)`
            : ''
        }</li>`,
    )}</ul></div>`;
  }

  async function dlqApply(r: Req, form: URLSearchParams): Promise<string> {
    const who = checkAction(r, form);
    const action = failedAction(form);
    const f = formFilter(form);
    const rows = Number(form.get('expect_rows'));
    const digest = parseDigest(form.get('expect_digest'));
    if (!Number.isInteger(rows) || rows < 0 || digest === undefined)
      throw new HttpError(400, 'expect_rows and expect_digest must come from a preview: preview the action first');
    let ids: string[];
    try {
      ids = await settleFailed(longPool, o.schema, action, f, { actor: who, via: 'console', expect: { rows, digest } }).finally(changed);
    } catch (err) {
      if (!(err instanceof SelectionChangedError)) throw err;
      r.status = 409;
      return dlqPreviewPage(r, action, f, err.message);
    }
    const body = html`<p id="result">${action === 'retry' ? 'Retried' : 'Discarded'} <b id="done">${ids.length}</b> event(s); the relays were woken.</p>
<ul>${ids.slice(0, 50).map((id) => html`<li>${eventLink(id)}</li>`)}</ul><p><a href="/blocked">Blocked keys</a> · <a href="/audit">Audit trail</a></p>`;
    return layout(r, 'Done', '/blocked', body);
  }

  /** A replay selection from a form: the events filter's fields (a subject ending in . or > is a prefix) and a seq range. */

  return { post: { '/dlq/preview': dlqPreview, '/dlq/apply': dlqApply } };
}
