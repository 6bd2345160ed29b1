import { WIRE_HEADERS } from '@ferry/core';
import { EVENT_STATES, parseFilter } from '../actions/event-filter.js';
import { showEventSql } from '../sql/show-event.js';
import { Html, html, iso, qs, showPayload } from './html.js';
import { LIST_LIMIT, PAYLOAD_BYTES } from './limits.js';
import { type ConsoleContext, HttpError, type PageModule, type Req } from './page-kit.js';
import { keyHistory, searchEvents } from './queries.js';

// GET /events (search the outbox) and GET /event?id= (one event, its payload and its key's versions).
export function eventsPages(c: ConsoleContext): PageModule {
  const { o, s } = c;
  const { layout, canAct, failedForm, replayForm, eventsTable, filterFields } = c.kit;

  async function eventsPage(r: Req): Promise<string> {
    const fields = Object.fromEntries(r.url.searchParams);
    const f = parseFilter(fields);
    const any = Object.keys(f).length > 0;
    const rows = any ? await searchEvents(o.pool, o.schema, f, LIST_LIMIT) : [];
    const input = (name: string, label: string, placeholder = '') =>
      html`<label>${label}<input name="${name}" value="${fields[name] ?? ''}" placeholder="${placeholder}"></label>`;
    const form = html`<form class="filter" method="get" action="/events">${input('id', 'id')}${input('key', 'key')}${input('subject', 'subject', 'orders.> or exact')}${input('type', 'type')}
<label>state<select name="state"><option value="">any</option>${EVENT_STATES.map((st) => html`<option${fields.state === st ? new Html(' selected') : ''}>${st}</option>`)}</select></label>
${input('since', 'created since', '2026-11-01T00:00:00Z')}${input('until', 'created until')}<button type="submit">Search</button></form>`;
    // Dead and backing-off rows are what a dlq action changes: offered for no state (every failed one) or either of them.
    const acted = f.state === undefined ? 'failed' : f.state === 'dead' || f.state === 'backing-off' ? f.state : undefined;
    const bulk =
      any && canAct(r) && acted !== undefined
        ? html`<p>Every ${acted === 'failed' ? 'failed (dead or backing-off)' : acted} event matching this filter: ${failedForm(r, 'retry', { ...filterFields(f), state: f.state }, `Retry all matching ${acted}…`)} ${failedForm(r, 'discard', { ...filterFields(f), state: f.state }, `Discard all matching ${acted}…`)} (a preview with the exact count comes first)</p>`
        : '';
    const replayable = any && canAct(r) && f.ids === undefined && (f.state === undefined || f.state === 'published');
    const replay = replayable
      ? html`<p>Every published event matching this filter: ${replayForm(r, { ...filterFields(f), id: undefined }, 'Replay all matching published…')} (to every consumer of their subjects; a preview with the exact count comes first)</p>`
      : '';
    const body = html`${form}${bulk}${replay}${
      any
        ? rows.length === 0
          ? html`<p class="note">No event matches.</p>`
          : html`<p class="note">${rows.length >= LIST_LIMIT ? `The newest ${LIST_LIMIT}` : `${rows.length}`} matching, newest first.</p>${eventsTable(rows)}`
        : html`<p class="note">Give an id, key, subject, type, state or time range.</p>`
    }`;
    return layout(r, 'Events', '/events', body);
  }

  async function eventPage(r: Req): Promise<string> {
    const f = parseFilter({ id: r.url.searchParams.get('id') ?? '' });
    const id = f.ids?.[0];
    if (!id) throw new HttpError(400, 'give ?id=EVENT_ID');
    const { rows } = await o.pool.query(showEventSql(s), [id, PAYLOAD_BYTES]);
    const e = rows[0] as
      | (Record<string, unknown> & {
          key: string;
          version: string;
          data: Buffer;
          data_bytes: number;
          content_type: string;
          headers: Record<string, unknown> | null;
        })
      | undefined;
    if (!e) throw new HttpError(404, `no outbox event ${id} (pruned after the retention, or never committed)`);
    const state = e.published_at
      ? e.dead_at
        ? 'discarded'
        : 'published'
      : e.dead_at
        ? 'dead'
        : Number(e.attempts) > 0
          ? 'backing-off'
          : 'pending';
    const payload = showPayload(e.data, e.content_type);
    const history = await keyHistory(o.pool, o.schema, e.key, e.version);
    const fields: Array<[string, unknown]> = [
      ['id', e.id],
      ['key', e.key],
      ['version', e.version],
      ['seq', e.seq],
      ['lane', e.lane],
      ['subject', e.subject],
      ['type', e.type],
      // Stamped by a publisher given contracts (@ferry/contracts): the contract the data was checked against.
      ['contract', contractHeader(e.headers, WIRE_HEADERS.dataschema) ?? 'none (published without contracts)'],
      ['contract version', contractHeader(e.headers, WIRE_HEADERS.dataversion)],
      ['source', e.source],
      ['content type', e.content_type],
      ['state', state],
      ['attempts', e.attempts],
      ['last error', e.last_error],
      ['occurred', iso(e.occurred_at as Date)],
      ['created', iso(e.created_at as Date)],
      // A discard is recorded as published and dead at once: its time is when it was discarded.
      ...(state === 'discarded'
        ? ([['discarded at', iso(e.published_at as Date | null)]] as Array<[string, unknown]>)
        : ([
            ['dead at', iso(e.dead_at as Date | null)],
            ['published at', iso(e.published_at as Date | null)],
          ] as Array<[string, unknown]>)),
      ['waiting behind it', e.blocked],
    ];
    const body = html`<table class="event">${fields.map(([k, v]) => html`<tr><th>${k}</th><td data-field="${k}">${v ?? '-'}</td></tr>`)}</table>
${state === 'dead' || state === 'backing-off' ? html`<p>${failedForm(r, 'retry', { id }, 'Retry…')} ${failedForm(r, 'discard', { id }, 'Discard…')}</p>` : ''}
${state === 'published' ? html`<p>${replayForm(r, { key: e.key, from_seq: String(e.seq), to_seq: String(e.seq) }, 'Replay this event…')} ${replayForm(r, { key: e.key, from_seq: String(e.seq) }, 'Replay this key from here…')}</p>` : ''}
<h2>Headers</h2><table class="headers">${Object.entries(e.headers ?? {}).map(([k, v]) => html`<tr><th>${k}</th><td>${typeof v === 'string' ? v : JSON.stringify(v)}</td></tr>`)}</table>
<h2>Payload (${payload.kind === 'hex' ? 'bytes, not UTF-8: hex' : payload.kind}, ${e.data_bytes} bytes${e.data_bytes > e.data.byteLength ? `, first ${e.data.byteLength} shown` : ''})</h2>
<pre class="payload">${payload.text}</pre>
<h2>Key history (versions around ${e.version})</h2>${eventsTable(history)}
<p><a href="/versions${qs({ key: e.key })}">What inbox consumers recorded for this key</a></p>`;
    return layout(r, `Event ${id}`, '/events', body);
  }

  return { get: { '/events': eventsPage, '/event': eventPage } };
}

/** A contract header of a stored event, by its exact name (a header named `constructor` finds nothing it was not given). */
function contractHeader(headers: Record<string, unknown> | null, name: string): string | undefined {
  const value = headers && Object.hasOwn(headers, name) ? headers[name] : undefined;
  return typeof value === 'string' ? value : undefined;
}
