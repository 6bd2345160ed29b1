import { OLD_BOSS_SCHEMA, pgBossDb, startPgBoss } from '@ferry/core';
import { findParkedElsewhere } from '@ferry/inbox';
import { PgBoss } from 'pg-boss';
import { SelectionChangedError } from '../actions/failed.js';
import { type ParkedAction, parkedEligible, settleParked } from '../actions/parked.js';
import { parseDigest, selectionOfSet } from '../actions/selection.js';
import { Html, html, qs, showPayload } from './html.js';
import { LIST_LIMIT, PAYLOAD_BYTES } from './limits.js';
import { type ConsoleContext, HttpError, type PageModule, type Req } from './page-kit.js';
import { bossJobTable, type ParkedRow, parkedCounts, parkedEvents } from './queries.js';
import { skipPages } from './skip-pages.js';

// GET /parked (each inbox consumer's parked events) and POST /parked/preview, /parked/apply (retry, discard).
export function parkedPages(c: ConsoleContext): PageModule {
  const { o, changed } = c;
  const { layout, csrfField, canAct, checkAction, eventLink, replayForm } = c.kit;
  // Keys waiting for a version nothing holds, and their previewed skip (skip-pages.ts).
  const skip = skipPages<Req>({
    pool: o.pool,
    schema: o.schema,
    bossSchema: o.bossSchema,
    layout,
    csrfField,
    canAct,
    checkAction,
    replayForm,
    httpError: (status, message) => new HttpError(status, message),
    changed,
  });

  async function parkedPage(r: Req): Promise<string> {
    // Nothing parked is out of sight: events an earlier release left under the old pg-boss schema, or
    // counted in inbox_versions but missing here (the same check as ferry inbox parked list).
    const strays = await findParkedElsewhere(o.pool, {
      schema: o.schema,
      bossSchema: o.bossSchema,
      oldBossSchemas: o.oldBossSchema === false ? [] : [o.oldBossSchema ?? OLD_BOSS_SCHEMA],
    }).catch(() => []);
    const warn = html`${strays.map((f) => html`<p class="advice" data-out-of-view="${f.consumer}">${f.advice}.</p>`)}`;
    const jobTable = await bossJobTable(o.pool, o.bossSchema);
    if (!jobTable)
      return layout(
        r,
        'Parked events',
        '/parked',
        html`${warn}<p class="note">No inbox parking lot in schema ${o.bossSchema} (ferry console --boss-schema).</p>`,
      );
    const consumer = r.url.searchParams.get('consumer') ?? '';
    const counts = await parkedCounts(o.pool, jobTable);
    const list = html`<table><tr><th>consumer</th><th>parked</th><th>failed</th></tr>${counts.map(
      (p) =>
        html`<tr><td><a href="/parked${qs({ consumer: p.consumer })}">${p.consumer}</a></td><td class="n">${p.live}</td><td class="n">${p.failed}</td></tr>`,
    )}</table>`;
    const stuck = await skip.stuckSection(r, consumer || undefined);
    if (!consumer || !counts.some((c) => c.consumer === consumer)) {
      return layout(
        r,
        'Parked events',
        '/parked',
        html`${warn}${counts.length ? list : html`<p class="ok">No parked events.</p>`}${stuck}`,
      );
    }
    const key = r.url.searchParams.get('key') ?? undefined;
    const rows = await parkedEvents(o.pool, jobTable, consumer, LIST_LIMIT, key ? { key } : {});
    const failed = rows.filter((p) => p.state === 'failed');
    const bulk =
      canAct(r) && failed.length > 0
        ? html`<p>${parkedForm(r, consumer, 'retry', failed, `Retry the ${failed.length} failed shown…`)} ${parkedForm(r, consumer, 'discard', failed, `Discard the ${failed.length} failed shown…`)}</p>`
        : '';
    const body = html`${warn}${list}<h2>Consumer ${consumer}${key ? ` · key ${key}` : ''}</h2>
<form class="filter" method="get" action="/parked"><input type="hidden" name="consumer" value="${consumer}"><label>key<input name="key" value="${key ?? ''}"></label><button type="submit">Filter</button></form>
${stuck}${bulk}${parkedTable(r, consumer, rows)}`;
    return layout(r, `Parked events of ${consumer}`, '/parked', body);
  }

  function parkedForm(r: Req, consumer: string, action: ParkedAction, rows: ParkedRow[], label: string): Html | string {
    if (!canAct(r)) return '';
    return html`<form class="inline" method="post" action="/parked/preview">${csrfField(r)}<input type="hidden" name="consumer" value="${consumer}"><input type="hidden" name="action" value="${action}">${rows.map(
      (p) => html`<input type="hidden" name="id" value="${p.jobId}">`,
    )}<button type="submit" data-action="${action}">${label}</button></form>`;
  }

  function parkedTable(r: Req, consumer: string, rows: ParkedRow[], actions = true): Html {
    return html`<table class="parked"><tr><th>job</th><th>state</th><th>key</th><th>version</th><th>type</th><th>event id</th><th>reason</th><th>error</th><th>retries</th><th>parked at</th><th></th></tr>
${rows.map((p) => {
  // A job that is not a Ferry parked event (another role's, in a shared pg-boss schema) is shown as
  // it is, its JSON escaped, and can be discarded; it never stops the rows around it.
  const message = p.malformed
    ? html`<details open><summary>job data (malformed)</summary><pre class="malformed">${p.malformed.raw}</pre></details>`
    : html`<details><summary>message</summary><table>${p.headers.map(([k, v]) => html`<tr><th>${k}</th><td>${v}</td></tr>`)}</table><pre>${showPayload(p.body, 'application/json').text.slice(0, PAYLOAD_BYTES)}</pre></details>`;
  const key = p.malformed
    ? '(malformed)'
    : p.key === null
      ? '(no key)'
      : html`<a href="/versions${qs({ key: p.key, consumer })}">${p.key}</a>`;
  const error = p.malformed ? `not a Ferry parked event: ${p.malformed.problem}` : (p.error ?? '');
  return html`<tr data-job="${p.jobId}"${p.malformed ? new Html(' data-malformed') : ''} class="${p.state === 'failed' ? 'bad' : ''}"><td class="mono">${p.jobId}</td><td>${p.state}</td><td>${key}</td><td class="n">${p.version ?? ''}</td><td>${p.type ?? ''}</td><td>${p.id ? eventLink(p.id) : ''}</td><td>${p.reason ?? ''}</td><td>${error}${p.lastError ? html`<br>last retry: ${p.lastError}` : ''}</td><td class="n">${p.retryCount}</td><td>${p.parkedAt}</td>
<td>${actions && p.state !== 'active' ? html`${parkedForm(r, consumer, 'retry', [p], 'Retry…')} ${parkedForm(r, consumer, 'discard', [p], 'Discard…')}` : ''}
${message}</td></tr>`;
})}</table>`;
  }

  const parkedAction = (form: URLSearchParams): ParkedAction => {
    const a = form.get('action');
    if (a !== 'retry' && a !== 'discard') throw new HttpError(400, `action must be retry or discard, got ${JSON.stringify(a)}`);
    return a;
  };

  function parkedTarget(form: URLSearchParams): { consumer: string; ids: string[] } {
    const consumer = form.get('consumer') ?? '';
    if (!/^[a-z_][a-z0-9_]{0,62}$/.test(consumer))
      throw new HttpError(400, `consumer ${JSON.stringify(consumer.slice(0, 64))} is not an inbox consumer name`);
    const ids = form.getAll('id');
    if (ids.length === 0 || ids.length > 1000) throw new HttpError(400, 'give 1 to 1000 parked job ids');
    for (const id of ids)
      if (!/^[0-9a-f-]{36}$/i.test(id)) throw new HttpError(400, `${JSON.stringify(id.slice(0, 40))} is not a parked job id`);
    return { consumer, ids };
  }

  async function parkedPreview(r: Req, form: URLSearchParams): Promise<string> {
    checkAction(r, form);
    const { consumer, ids } = parkedTarget(form);
    return parkedPreviewPage(r, parkedAction(form), consumer, ids);
  }

  /** The preview of a parked action, and its confirmation form carrying the exact selection; `refused` says why a confirmation was not done. */
  async function parkedPreviewPage(r: Req, action: ParkedAction, consumer: string, ids: string[], refused?: string): Promise<string> {
    const jobTable = await bossJobTable(o.pool, o.bossSchema);
    const rows = jobTable ? await parkedEvents(o.pool, jobTable, consumer, 1000, { ids }) : [];
    const eligible = rows.filter((p) => parkedEligible(action, p.state));
    const selection = selectionOfSet(eligible.map((p) => p.jobId));
    const keys = new Set(eligible.map((p) => p.key));
    const notice = refused
      ? html`<p class="advice" id="error">${refused}</p><p class="note" id="changed">The selection changed since your preview: nothing was done. This is the new preview.</p>`
      : '';
    const body =
      eligible.length === 0
        ? html`${notice}<p class="note">None of these parked events can be ${action === 'retry' ? 'retried (only failed ones can)' : 'discarded now'}.</p>`
        : html`${notice}<div class="preview"><p id="summary">This ${action === 'retry' ? 'retries' : 'discards'} <b id="count">${eligible.length}</b> parked event(s) of consumer <b>${consumer}</b> (${keys.size} key(s))${
            action === 'retry'
              ? '; the inbox applies each through the same gate, and its key unblocks once it is applied.'
              : '; in sequential mode each discarded version counts as skipped, and the key’s later events apply.'
          }</p>
<p class="note">Only these ${eligible.length} parked event(s) change: if the selection differs when you confirm, nothing is done.</p>
<form method="post" action="/parked/apply">${csrfField(r)}<input type="hidden" name="action" value="${action}"><input type="hidden" name="consumer" value="${consumer}">${eligible.map(
            (p) => html`<input type="hidden" name="id" value="${p.jobId}">`,
          )}<input type="hidden" name="expect_rows" value="${selection.rows}"><input type="hidden" name="expect_digest" value="${selection.digest}">
<button id="confirm" class="danger" type="submit">${action === 'retry' ? 'Retry' : 'Discard'} ${eligible.length} parked event(s)</button> <a href="/parked${qs({ consumer })}">Cancel</a></form></div>
${parkedTable(r, consumer, eligible, false)}`;
    return layout(r, `Preview: ${action} parked events`, '/parked', body);
  }

  async function parkedApply(r: Req, form: URLSearchParams): Promise<string> {
    const who = checkAction(r, form);
    const action = parkedAction(form);
    const { consumer, ids } = parkedTarget(form);
    const rows = Number(form.get('expect_rows'));
    const digest = parseDigest(form.get('expect_digest'));
    if (!Number.isInteger(rows) || rows < 0 || digest === undefined)
      throw new HttpError(400, 'expect_rows and expect_digest must come from a preview: preview the action first');
    const boss = new PgBoss({
      db: pgBossDb(o.pool),
      schema: o.bossSchema,
      supervise: false,
      schedule: false,
      migrate: false,
      createSchema: false,
    });
    boss.on('error', () => {});
    let done: Awaited<ReturnType<typeof settleParked>>;
    try {
      await startPgBoss(() => boss.start());
      done = await settleParked(action, {
        boss,
        pool: o.pool,
        schema: o.schema,
        bossSchema: o.bossSchema,
        consumer,
        ids,
        expect: { rows, digest },
        actor: who,
        via: 'console',
      }).finally(changed);
    } catch (err) {
      if (!(err instanceof SelectionChangedError)) throw err;
      r.status = 409;
      return parkedPreviewPage(r, action, consumer, ids, err.message);
    } finally {
      await boss.stop({ graceful: false, close: false }).catch(() => {});
    }
    const body = html`<p id="result">${action === 'retry' ? 'Retried' : 'Discarded'} <b id="done">${done.changed}</b> of ${ids.length} parked event(s) of ${consumer}.</p>
${done.notRecorded ? html`<p class="advice">Not recorded in the audit trail: ${done.notRecorded}</p>` : ''}${
  // A discard leaves a key whose missing version lies below the discarded ones waiting: what remains to decide.
  action === 'discard' ? await skip.stuckSection(r, consumer) : ''
}<p><a href="/parked${qs({ consumer })}">Parked events of ${consumer}</a> · <a href="/audit">Audit trail</a></p>`;
    return layout(r, 'Done', '/parked', body);
  }

  return {
    get: { '/parked': parkedPage },
    post: { '/parked/preview': parkedPreview, '/parked/apply': parkedApply, '/skip/preview': skip.preview, '/skip/apply': skip.apply },
  };
}
