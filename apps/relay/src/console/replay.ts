import { parseFilter } from '../actions/event-filter.js';
import { SelectionChangedError } from '../actions/failed.js';
import { previewReplay, type ReplaySelection, replayEvents } from '../actions/replay.js';
import { parseDigest } from '../actions/selection.js';
import { type Html, hiddenField, html } from './html.js';
import { REPLAY_MAX } from './limits.js';
import { type ConsoleContext, HttpError, type PageModule, type Req } from './page-kit.js';

// POST /replay/preview and /replay/apply: send published events again, after a preview.
export function replayPages(c: ConsoleContext): PageModule {
  const { o, longPool } = c;
  const { layout, csrfField, checkAction, eventLink } = c.kit;

  function replaySelection(form: URLSearchParams): ReplaySelection {
    const f = parseFilter(Object.fromEntries(['key', 'subject', 'type', 'since', 'until'].map((k) => [k, form.get(k) ?? ''])));
    const seq = (name: string): bigint | undefined => {
      const v = form.get(name) ?? '';
      if (v === '') return undefined;
      if (!/^\d{1,19}$/.test(v))
        throw new HttpError(400, `${name} must be an outbox seq (a positive integer), got ${JSON.stringify(v.slice(0, 40))}`);
      return BigInt(v);
    };
    const sel: ReplaySelection = {};
    const fromSeq = seq('from_seq');
    const toSeq = seq('to_seq');
    if (fromSeq !== undefined) sel.fromSeq = fromSeq;
    if (toSeq !== undefined) sel.toSeq = toSeq;
    if (f.key !== undefined) sel.key = f.key;
    if (f.type !== undefined) sel.type = f.type;
    if (f.since) sel.since = f.since;
    if (f.until) sel.until = f.until;
    if (f.subject !== undefined) {
      if (/[.>]$/.test(f.subject)) sel.subjectPrefix = f.subject.replace(/>$/, '');
      else sel.subject = f.subject;
    }
    if (Object.keys(sel).length === 0) throw new HttpError(400, 'a replay needs a filter: a key, subject, type, time range or seq range');
    return sel;
  }

  function replayHidden(sel: ReplaySelection): Html[] {
    const fields: Record<string, string | undefined> = {
      key: sel.key,
      subject: sel.subject ?? (sel.subjectPrefix !== undefined ? `${sel.subjectPrefix}>` : undefined),
      type: sel.type,
      since: sel.since?.toISOString(),
      until: sel.until?.toISOString(),
      from_seq: sel.fromSeq?.toString(),
      to_seq: sel.toSeq?.toString(),
    };
    return Object.entries(fields)
      .filter(([, v]) => v !== undefined)
      .map(([k, v]) => hiddenField(k, v as string));
  }

  async function replayPreview(r: Req, form: URLSearchParams): Promise<string> {
    checkAction(r, form);
    return replayPreviewPage(r, replaySelection(form));
  }

  /** The preview of a replay, and its confirmation form carrying the exact selection; `refused` says why a confirmation was not done. */
  async function replayPreviewPage(r: Req, sel: ReplaySelection, refused?: string): Promise<string> {
    const p = await previewReplay(longPool, o.schema, sel);
    const described = html`<span class="mono">${JSON.stringify(Object.fromEntries(Object.entries(sel).map(([k, v]) => [k, typeof v === 'bigint' ? v.toString() : v])))}</span>`;
    const notice = refused
      ? html`<p class="advice" id="error">${refused}</p><p class="note" id="changed">The selection changed since your preview: nothing was sent. This is the new preview.</p>`
      : '';
    let body: Html;
    if (p.matched === 0)
      body = html`${notice}<p class="note">No published event matches ${described}: nothing to replay.</p><p><a href="/events">Back</a></p>`;
    else if (p.matched > REPLAY_MAX)
      body = html`${notice}<p class="advice" id="summary">${p.matched} events match ${described}: the console replays at most ${REPLAY_MAX} at a time. Narrow the filter, or run ferry replay with the same filters (it shows progress and prints resume commands).</p>`;
    else if (!o.nc) body = html`<p class="advice">Cannot replay: ${o.natsError ?? 'not connected to NATS (ferry console --nats-url)'}.</p>`;
    else
      body = html`${notice}<div class="preview"><p id="summary">This replays <b id="count">${p.matched}</b> published event(s) (seq ${p.firstSeq}..${p.lastSeq}) to <b>every consumer of their subjects</b>, in seq order, each key's copies one at a time. Inboxes drop the events they already applied.</p>
<p class="note">Filter: ${described}. Only these ${p.selection?.rows ?? p.matched} events, up to seq ${p.lastSeq}, are sent: if the selection differs when you confirm, nothing is sent.</p>
<form method="post" action="/replay/apply">${csrfField(r)}${replayHidden(sel)}
<input type="hidden" name="expect_rows" value="${p.selection?.rows ?? p.matched}"><input type="hidden" name="expect_last_seq" value="${p.lastSeq ?? ''}"><input type="hidden" name="expect_digest" value="${p.selection?.digest ?? ''}">
<button id="confirm" class="danger" type="submit">Replay ${p.matched} event(s)</button> <a href="/events">Cancel</a></form></div>`;
    return layout(r, 'Preview: replay events', '/events', body);
  }

  async function replayApply(r: Req, form: URLSearchParams): Promise<string> {
    const who = checkAction(r, form);
    const sel = replaySelection(form);
    const rows = Number(form.get('expect_rows'));
    const lastSeq = form.get('expect_last_seq') ?? '';
    const digest = parseDigest(form.get('expect_digest'));
    if (!Number.isInteger(rows) || rows < 1 || rows > REPLAY_MAX || !/^\d{1,19}$/.test(lastSeq) || digest === undefined)
      throw new HttpError(400, 'expect_rows, expect_last_seq and expect_digest must come from a preview: preview the replay first');
    if (!o.nc) throw new HttpError(503, `cannot replay: ${o.natsError ?? 'not connected to NATS (ferry console --nats-url)'}`);
    // Bounded by the preview's last seq, so events published since do not join; the selection must be the preview's.
    const bound = BigInt(lastSeq);
    const bounded: ReplaySelection = { ...sel, toSeq: sel.toSeq !== undefined && sel.toSeq < bound ? sel.toSeq : bound };
    const p = { matched: rows, firstSeq: null, lastSeq };
    let report: Awaited<ReturnType<typeof replayEvents>>;
    try {
      report = await replayEvents(longPool, o.nc, o.schema, bounded, p, {
        actor: who,
        via: 'console',
        maxInFlight: 256,
        publishTimeoutMs: 10_000,
        expect: { rows, digest },
      });
    } catch (err) {
      if (!(err instanceof SelectionChangedError)) throw err;
      r.status = 409;
      return replayPreviewPage(r, sel, err.message);
    }
    const body = html`<p id="result">Replayed <b id="done">${report.replayed}</b> of ${report.matched} event(s) (seq ${report.firstSeq}..${report.lastSeq}) in ${(report.durationMs / 1000).toFixed(1)} s; each copy's Nats-Msg-Id is its event id followed by <span class="mono">${report.msgIdSuffix}</span>.</p>
${
  report.failures.length > 0
    ? html`<p class="advice" id="failed">${report.failures.length} publish(es) failed; ${report.skipped} later event(s) were not sent. The first: ${eventLink(report.failures[0]?.id ?? '')} of key ${report.failures[0]?.key}: ${report.failures[0]?.error}</p>`
    : ''
}${report.vanished > 0 ? html`<p class="advice">${report.vanished} selected event(s) were pruned or discarded before they were read.</p>` : ''}${
  report.notRecorded ? html`<p class="advice">Not recorded in the audit trail: ${report.notRecorded}</p>` : ''
}<p><a href="/events">Events</a> · <a href="/audit">Audit trail</a></p>`;
    return layout(r, 'Done', '/events', body);
  }

  return { post: { '/replay/preview': replayPreview, '/replay/apply': replayApply } };
}
