import { html, iso, qs } from './html.js';
import { GROUPS_SHOWN, LIST_LIMIT } from './limits.js';
import type { ConsoleContext, PageModule, Req } from './page-kit.js';
import { type BlockedRow, blockedKeys, failureGroups, GROUPED_ROWS } from './queries.js';

// GET /blocked: the keys held behind a failed head, and the failures grouped by reason.
export function blockedPages(c: ConsoleContext): PageModule {
  const { o, paced } = c;
  const { layout, eventLink, keyLink, failedForm } = c.kit;

  // The blocked keys, like the overview, are read at most once per refresh interval for every viewer
  // (a scan of the failed rows: a tab refreshing it must not slow the relays); an action here drops it.
  type BlockedRead = [BlockedRow[], Awaited<ReturnType<typeof failureGroups>>];
  let blocked: { at: number; tookMs: number; rows: Promise<BlockedRead> } | undefined;
  function blockedList(): Promise<BlockedRead> {
    if (!blocked || Date.now() - blocked.at >= paced(blocked.tookMs)) {
      const at = Date.now();
      const rows = Promise.all([blockedKeys(o.pool, o.schema, LIST_LIMIT), failureGroups(o.pool, o.schema, GROUPS_SHOWN)]);
      const entry = { at, tookMs: 0, rows };
      blocked = entry;
      // A failed read is paced like a good one: tabs refreshing a page whose read times out must not
      // send it again every second.
      const took = () => {
        entry.tookMs = Date.now() - at;
      };
      rows.then(took, took);
    }
    return blocked.rows;
  }
  c.onChanged(() => {
    blocked = undefined;
  });

  async function blockedPage(r: Req): Promise<string> {
    const [rows, { groups, grouped: groupedRows }] = await blockedList();
    const grouped =
      groups.length === 0
        ? ''
        : html`<h2>By reason</h2><table class="groups"><tr><th>state</th><th>reason</th><th>blocked keys</th><th>oldest</th><th></th></tr>${groups.map(
            (g) =>
              html`<tr class="bad" data-reason="${g.reason}"><td>${g.state}</td><td class="reason">${g.reason || '(none)'}</td><td class="n keys">${g.keys}</td><td>${iso(g.oldest)}</td><td>${
                g.reason
                  ? html`${failedForm(r, 'retry', { reason: g.reason, state: g.state }, `Retry all ${g.keys}…`)} ${failedForm(r, 'discard', { reason: g.reason, state: g.state }, `Discard all ${g.keys}…`)}`
                  : html`<a href="/events${qs({ state: g.state })}">list</a>`
              }</td></tr>`,
          )}</table><p class="note">${groupedRows >= GROUPED_ROWS ? `Grouped over the oldest ${GROUPED_ROWS} failed heads (there are more); an action previews its exact count over all of them. ` : ''}${groups.length >= GROUPS_SHOWN ? `The ${GROUPS_SHOWN} largest groups shown.` : ''}</p><h2>Oldest first</h2>`;
    const body =
      rows.length === 0
        ? html`<p class="ok">No key is blocked.</p>`
        : html`<p class="note">Each key waits behind its failed head; the relay retries a backing-off head by itself, a dead one waits for you. Retry a head once its cause is fixed (a stream for its subject, a permission) rather than wait for its next attempt, or discard it, dead or backing off, to let the rows behind it flow; a group of the same reason is retried or discarded in one action.</p>${grouped}
<table class="blocked"><tr><th>key</th><th>head id</th><th>version</th><th>subject</th><th>type</th><th>state</th><th>attempts</th><th>next retry</th><th>reason</th><th>waiting behind</th><th></th></tr>
${rows.map(
  (b) =>
    html`<tr class="bad" data-key="${b.key}"><td>${keyLink(b.key)}</td><td>${eventLink(b.id)}</td><td class="n">${b.version}</td><td>${b.subject}</td><td>${b.type}</td><td>${b.dead_at ? 'dead' : 'backing off'}</td><td class="n">${b.attempts}</td><td>${b.dead_at ? '-' : iso(b.next_attempt_at)}</td><td class="reason">${b.last_error ?? ''}</td><td class="n waiting">${b.waiting}</td>
<td>${failedForm(r, 'retry', { key: b.key }, 'Retry…')} ${failedForm(r, 'discard', { key: b.key }, 'Discard…')}</td></tr>`,
)}</table>${rows.length >= LIST_LIMIT ? html`<p class="note">The oldest ${LIST_LIMIT} shown.</p>` : ''}`;
    return layout(r, 'Blocked keys', '/blocked', body);
  }

  return { get: { '/blocked': blockedPage } };
}
