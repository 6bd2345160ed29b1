import type { InboxHealth } from '@ferry/inbox';
import { ago, type Html, html } from './html.js';

/**
 * The overview's "Inboxes" section: every inbox whose heartbeat is in the schema's
 * `inbox_instances` (inbox migration 000008), with its consumer, release and last heartbeat, as the
 * relays are listed above it. One that stopped beating is shown stale (a clean stop removes its row).
 */
export function inboxInstancesSection(inbox: InboxHealth | null): Html {
  if (inbox === null) return html``;
  const rows = inbox.instances;
  const stale = rows.filter((i) => i.stale).length;
  return html`<h2>Inboxes</h2>
${
  rows.length === 0
    ? html`<p class="note">No inbox has a heartbeat in this schema.</p>`
    : html`<table id="inbox-instances"><tr><th>instance</th><th>consumer</th><th>release</th><th>mode</th><th>where</th><th>last heartbeat</th></tr>${rows.map(
        (i) =>
          html`<tr class="${i.stale ? 'bad' : ''}" data-inbox="${i.instance}"><td class="mono">${i.instance}</td><td>${i.consumer}</td><td>${i.release}</td><td>${i.mode} on ${i.stream}</td><td>pid ${i.pid ?? '?'} on ${i.host ?? '?'}</td><td>${ago(i.lastHeartbeatAgeSeconds)} ago${i.stale ? ': stale, stopped beating (killed, frozen or cut off)' : ''}</td></tr>`,
      )}</table>`
}${stale > 0 ? html`<p class="note">${stale} inbox(es) stopped beating without a clean stop: check those services.</p>` : ''}${inbox.note ? html`<p class="note">${inbox.note}</p>` : ''}`;
}

/** The overview's advice for a consumer whose keys wait on a version nothing holds. */
export function waitingKeysAdvice(inbox: InboxHealth | null): Html[] {
  return (inbox?.consumers ?? [])
    .filter((c) => c.keysWaitingOnMissingVersion > 0)
    .map(
      (c) =>
        html`<p class="advice">Consumer ${c.consumer} has ${c.keysWaitingOnMissingVersion} key(s) waiting on a version nothing holds: they never move by themselves (ferry inbox parked list --consumer ${c.consumer}).</p>`,
    );
}
