import { listActions } from '../actions/audit.js';
import { html, iso } from './html.js';
import { LIST_LIMIT } from './limits.js';
import type { ConsoleContext, PageModule, Req } from './page-kit.js';

// GET /audit: the newest operator actions, from the console and the CLI.
export function auditPages(c: ConsoleContext): PageModule {
  const { o, s } = c;
  const { layout } = c.kit;

  async function auditPage(r: Req): Promise<string> {
    const rows = await listActions(o.pool, s, LIST_LIMIT).catch((err: Error) => err);
    const body =
      rows instanceof Error
        ? html`<p class="advice">${rows.message} (ferry migrate creates operator_actions)</p>`
        : rows.length === 0
          ? html`<p class="note">No action recorded yet.</p>`
          : html`<table class="audit"><tr><th>#</th><th>when</th><th>who</th><th>db role</th><th>via</th><th>action</th><th>filter</th><th>rows</th><th>outcome</th></tr>${rows.map(
              (a) =>
                html`<tr><td class="n">${a.id}</td><td>${iso(a.at)}</td><td>${a.actor}</td><td>${a.db_role}</td><td>${a.via}</td><td>${a.action}</td><td class="mono">${JSON.stringify(a.filter)}</td><td class="n">${a.rows}</td><td class="${a.outcome === 'ok' || a.outcome.startsWith('started: ') ? '' : 'bad'}">${a.outcome}</td></tr>`,
            )}</table>`;
    return layout(r, 'Audit trail', '/audit', body);
  }

  return { get: { '/audit': auditPage } };
}
