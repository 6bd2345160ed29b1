import type { EventFilter } from '../actions/event-filter.js';
import type { FailedAction } from '../actions/failed.js';
import type { ConsoleAuth } from './auth.js';
import { Html, hiddenField, html, iso, qs } from './html.js';
import type { ConsoleSetup } from './options.js';
import type { PageKit, Req } from './page-kit.js';
import type { EventRow } from './queries.js';

// The frame of every page (header, navigation, the line saying why actions are off) and the pieces
// several pages share: links to an event and a key, the action buttons, the events table.

export function pageKit(o: ConsoleSetup, auth: ConsoleAuth): PageKit {
  const csrfField = (r: Req) => html`<input type="hidden" name="csrf" value="${r.csrf}">`;
  const { canAct, checkAction, credentials } = auth;

  function layout(r: Req, title: string, here: string, body: Html): string {
    const nav = [
      ['/', 'Overview'],
      ['/blocked', 'Blocked keys'],
      ['/events', 'Events'],
      ['/parked', 'Parked'],
      ['/versions', 'Inbox versions'],
      ['/streams', 'Streams'],
      ['/audit', 'Audit'],
    ].map(([href, label]) => html`<a href="${href}"${here === href ? new Html(' class="here"') : ''}>${label}</a>`);
    const who = r.who === null ? (credentials ? html`<a href="/login">log in</a>` : 'actions off') : html`as ${r.who}`;
    return `<!doctype html>${html`<html lang="en"><head><meta charset="utf-8"><title>${title} · Ferry console</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="stylesheet" href="/console.css"><script src="/console.js" defer></script></head>
<body><header><strong>Ferry</strong> <span class="mono">${o.schema}</span> ${nav}<span class="who">${o.readOnly ? 'read-only · ' : ''}${who} <span id="stamp"></span></span></header>
<main>${actionsOff(r)}<h1>${title}</h1>${body}</main></body></html>`}`;
  }

  /** One line on every page that offers no action: why, and how to turn them on. */
  function actionsOff(r: Req): Html | string {
    if (canAct(r)) return '';
    const why = o.readOnly
      ? 'Actions are off: this console is read-only (started with --read-only). To retry, discard or replay, start one without --read-only and with --token-file or --basic-auth-file.'
      : !credentials
        ? 'Actions are off: this console has no token or credentials, so it only shows. To retry, discard or replay here, start it with --token-file FILE (a random token of 16+ characters: openssl rand -hex 24 > FILE) or --basic-auth-file FILE (user:password), then log in.'
        : undefined;
    if (why) return html`<p class="note" id="actions-off">${why}</p>`;
    return html`<p class="note" id="actions-off">Actions are off until you <a href="/login">log in</a> with the console's token or credentials.</p>`;
  }

  const eventLink = (id: string) => html`<a class="mono" href="/event${qs({ id })}">${id}</a>`;
  const keyLink = (key: string) => html`<a href="/events${qs({ key })}">${key}</a>`;

  function failedForm(r: Req, action: FailedAction, fields: Record<string, string | undefined>, label: string): Html | string {
    if (!canAct(r)) return '';
    const hidden = Object.entries(fields)
      .filter(([, v]) => v !== undefined && v !== '')
      .map(([k, v]) => hiddenField(k, v as string));
    return html`<form class="inline" method="post" action="/dlq/preview">${csrfField(r)}<input type="hidden" name="action" value="${action}">${hidden}<button type="submit" data-action="${action}">${label}</button></form>`;
  }

  function replayForm(r: Req, fields: Record<string, string | undefined>, label: string): Html | string {
    if (!canAct(r)) return '';
    const hidden = Object.entries(fields)
      .filter(([, v]) => v !== undefined && v !== '')
      .map(([k, v]) => hiddenField(k, v as string));
    return html`<form class="inline" method="post" action="/replay/preview">${csrfField(r)}${hidden}<button type="submit" data-action="replay">${label}</button></form>`;
  }

  function eventsTable(rows: EventRow[]): Html {
    return html`<table class="events"><tr><th>seq</th><th>id</th><th>key</th><th>version</th><th>subject</th><th>type</th><th>state</th><th>attempts</th><th>created</th><th>last error</th></tr>
${rows.map(
  (e) =>
    html`<tr data-id="${e.id}"><td class="n">${e.seq}</td><td>${eventLink(e.id)}</td><td>${keyLink(e.key)}</td><td class="n">${e.version}</td><td>${e.subject}</td><td>${e.type}</td><td class="${e.state === 'dead' || e.state === 'backing-off' ? 'bad' : e.state.startsWith('waiting') ? 'warn' : ''}">${e.state}</td><td class="n">${e.attempts}</td><td>${iso(e.created_at)}</td><td>${e.last_error ?? ''}</td></tr>`,
)}</table>`;
  }

  function filterFields(f: EventFilter): Record<string, string | undefined> {
    return {
      id: f.ids?.[0],
      key: f.key,
      subject: f.subject,
      type: f.type,
      since: f.since?.toISOString(),
      until: f.until?.toISOString(),
      reason: f.reason,
    };
  }

  return { layout, csrfField, canAct, checkAction, eventLink, keyLink, failedForm, replayForm, eventsTable, filterFields };
}
