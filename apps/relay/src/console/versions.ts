import { html, iso, qs } from './html.js';
import type { ConsoleContext, PageModule, Req } from './page-kit.js';
import { inboxVersions } from './queries.js';

// GET /versions?key=: what each inbox consumer recorded for a key.
export function versionsPages(c: ConsoleContext): PageModule {
  const { o } = c;
  const { layout } = c.kit;

  async function versionsPage(r: Req): Promise<string> {
    const key = r.url.searchParams.get('key') ?? '';
    const consumer = r.url.searchParams.get('consumer') || undefined;
    const form = html`<form class="filter" method="get" action="/versions"><label>key<input name="key" value="${key}"></label><label>consumer (optional)<input name="consumer" value="${consumer ?? ''}"></label><button type="submit">Show</button></form>`;
    if (!key)
      return layout(
        r,
        'Inbox versions',
        '/versions',
        html`${form}<p class="note">What each inbox consumer applied for a key (inbox_versions).</p>`,
      );
    const rows = await inboxVersions(o.pool, o.schema, key, consumer);
    const body =
      rows === null
        ? html`${form}<p class="note">No inbox tables in schema ${o.schema}.</p>`
        : html`${form}${
            rows.length === 0
              ? html`<p class="note">No consumer recorded key ${key}.</p>`
              : html`<table class="versions"><tr><th>consumer</th><th>key</th><th>version applied</th><th>applied at</th><th>parked</th><th>skipped versions</th></tr>${rows.map(
                  (v) =>
                    html`<tr><td><a href="/parked${qs({ consumer: v.consumer, key: v.key })}">${v.consumer}</a></td><td>${v.key}</td><td class="n">${v.version}</td><td>${iso(v.applied_at)}</td><td class="n">${v.parked ?? '-'}</td><td>${(v.skipped ?? []).join(', ')}</td></tr>`,
                )}</table>`
          }<p><a href="/events${qs({ key })}">The outbox events of key ${key}</a></p>`;
    return layout(r, `Inbox versions of ${key}`, '/versions', body);
  }

  return { get: { '/versions': versionsPage } };
}
