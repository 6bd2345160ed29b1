import { findStuckKeys, type KeyGap } from '@ferry/inbox';
import type pg from 'pg';
import { parseDigest, SelectionChangedError } from '../actions/selection.js';
import { describeOutbox, previewSkip, type SkipTarget, settleSkip } from '../actions/skip.js';
import { type Html, hiddenField, html, qs } from './html.js';

// The console's "skip missing versions" (issue 43, item 1): the parked page lists a consumer's keys
// that wait for a version nothing holds, each with a form to /skip/preview; the preview says what
// the key waits for and what holds its later versions, offers a replay first when the outbox still
// holds a missing version, and carries the exact selection to /skip/apply, which skips and audits
// (actions/skip.ts, as `ferry inbox skip` does).

/** What the pages need from the console's handler (its request type R, its layout and its checks). */
export interface SkipPageDeps<R extends { status?: number }> {
  pool: pg.Pool;
  schema: string;
  bossSchema: string;
  layout(r: R, title: string, here: string, body: Html): string;
  csrfField(r: R): Html;
  canAct(r: R): boolean;
  /** Refuses (throws) an action without credentials, CSRF token or same origin; returns who acts. */
  checkAction(r: R, form: URLSearchParams): string;
  replayForm(r: R, fields: Record<string, string | undefined>, label: string): Html | string;
  /** An error the handler answers with `status`. */
  httpError(status: number, message: string): Error;
  /** After a change: the overview's cached numbers are stale. */
  changed(): void;
}

const CONSUMER = /^[a-z_][a-z0-9_]{0,62}$/;
const VERSION = /^\d{1,19}$/;
/** Stuck keys listed per consumer at most. */
const STUCK_SHOWN = 50;

export function skipPages<R extends { status?: number }>(d: SkipPageDeps<R>) {
  const target = (consumer: string, key: string): SkipTarget => ({ schema: d.schema, bossSchema: d.bossSchema, consumer, key });

  function skipForm(r: R, consumer: string, key: string, label: string): Html | string {
    if (!d.canAct(r)) return '';
    return html`<form class="inline" method="post" action="/skip/preview">${d.csrfField(r)}<input type="hidden" name="consumer" value="${consumer}">${hiddenField('key', key)}<button type="submit" data-action="skip">${label}</button></form>`;
  }

  /**
   * The parked page's section: the keys (of `consumer`, or of every consumer) that wait for a version
   * nothing holds, each with its skip form. A consumer whose stuck keys have nothing parked (every
   * parked event discarded) has no row in the parked counts: the page without a consumer lists it here.
   */
  async function stuckSection(r: R, consumer?: string): Promise<Html | string> {
    const stuck = await findStuckKeys(d.pool, { schema: d.schema, bossSchema: d.bossSchema, ...(consumer ? { consumer } : {}) }).catch(
      () => [] as KeyGap[],
    );
    if (stuck.length === 0) return '';
    return html`<h2>Keys waiting for a version nothing holds</h2>
<p class="advice" id="stuck">${stuck.length} key(s)${consumer ? ` of ${consumer}` : ''} wait for a version that is not applied, not stored early and not parked: they cannot move on until it arrives (replay it, when the outbox still has it) or it is accepted as lost.</p>
<table class="stuck"><tr><th>consumer</th><th>key</th><th>at version</th><th>waits for</th><th>missing</th><th>parked</th><th>stored early</th><th>discarded</th><th></th></tr>${stuck
      .slice(0, STUCK_SHOWN)
      .map(
        (g) =>
          html`<tr data-stuck-key="${g.key}"><td>${g.consumer}</td><td>${g.key}</td><td class="n">${g.recorded}</td><td class="n">${g.waitsFor}</td><td>${g.missing ? `${g.missing.from}..${g.missing.through}` : ''}</td><td class="n">${g.parked}</td><td class="n">${g.early}</td><td>${g.discarded.join(', ')}</td><td>${skipForm(r, g.consumer, g.key, 'Skip missing versions…')}</td></tr>`,
      )}</table>`;
  }

  function skipTarget(form: URLSearchParams): { consumer: string; key: string; through?: bigint } {
    const consumer = form.get('consumer') ?? '';
    if (!CONSUMER.test(consumer)) throw d.httpError(400, `consumer ${JSON.stringify(consumer.slice(0, 64))} is not an inbox consumer name`);
    const key = form.get('key') ?? '';
    if (key === '') throw d.httpError(400, 'name the key whose missing versions to skip');
    const t = form.get('through') ?? '';
    if (t !== '' && !VERSION.test(t)) throw d.httpError(400, `through must be a version, got ${JSON.stringify(t.slice(0, 40))}`);
    return { consumer, key, ...(t !== '' ? { through: BigInt(t) } : {}) };
  }

  async function previewPage(r: R, consumer: string, key: string, through: bigint | undefined, refused?: string): Promise<string> {
    const p = await previewSkip(d.pool, target(consumer, key), through);
    const g = p.gap;
    const notice = refused
      ? html`<p class="advice" id="error">${refused}</p><p class="note" id="changed">The key changed since your preview: nothing was done. This is the new preview.</p>`
      : '';
    const published = p.outbox.filter((o) => o.state === 'published');
    const first = published[0];
    const last = published.at(-1);
    const replay =
      first && last
        ? html`<p class="advice" id="replay-first">${describeOutbox(p, d.schema)[0] ?? ''}</p><p>${d.replayForm(r, { key, from_seq: first.seq, to_seq: last.seq }, `Replay version(s) ${published.map((o) => o.version).join(', ')} first…`)}</p>`
        : '';
    const others = describeOutbox(p, d.schema).slice(published.length > 0 ? 1 : 0);
    const held = g.held.map(
      (h) =>
        html`<tr><td class="n">${h.version}</td><td>${h.place}</td><td>${h.state ?? ''}</td><td class="mono">${h.jobId ?? ''}</td></tr>`,
    );
    const state = html`<p id="state">Key <b>${key}</b> of consumer <b>${consumer}</b> is at version <b>${g.recorded}</b> and waits for version <b>${g.waitsFor}</b>${
      g.nextHeld ? ' (held).' : ', which nothing holds (not applied, not stored early, not parked).'
    }${g.discarded.length > 0 ? ` Discarded: ${g.discarded.join(', ')}.` : ''}</p>
${held.length > 0 ? html`<table class="held"><tr><th>version</th><th>where</th><th>state</th><th>job</th></tr>${held}</table>` : ''}`;
    let body: Html;
    if (!p.range) body = html`${notice}${state}<p class="note" id="summary">${p.refusal ?? 'Nothing to skip.'}</p>`;
    else
      body = html`${notice}${state}${replay}${others.map((l) => html`<p class="note">${l}</p>`)}<div class="preview"><p id="summary">This accepts version(s) <b id="range">${p.range.from}..${p.range.through}</b> of key <b>${key}</b> as lost: they are never applied (a copy arriving later is dropped as stale), and the key's stored and parked later versions apply in order.</p>
<p class="note">Only this key and range change, and only while the key is still at version ${g.recorded}: if it moved when you confirm, nothing is done.</p>
<form method="post" action="/skip/apply">${d.csrfField(r)}<input type="hidden" name="consumer" value="${consumer}">${hiddenField('key', key)}<input type="hidden" name="through" value="${p.range.through}"><input type="hidden" name="expect_digest" value="${p.selection.digest}">
<button id="confirm" class="danger" type="submit">${published.length > 0 ? 'Skip them anyway' : 'Skip'} version(s) ${p.range.from}..${p.range.through}</button> <a href="/parked${qs({ consumer })}">Cancel</a></form></div>`;
    return d.layout(r, 'Preview: skip missing versions', '/parked', body);
  }

  async function preview(r: R, form: URLSearchParams): Promise<string> {
    d.checkAction(r, form);
    const { consumer, key, through } = skipTarget(form);
    return previewPage(r, consumer, key, through);
  }

  async function apply(r: R, form: URLSearchParams): Promise<string> {
    const who = d.checkAction(r, form);
    const { consumer, key, through } = skipTarget(form);
    const digest = parseDigest(form.get('expect_digest'));
    if (through === undefined || digest === undefined)
      throw d.httpError(400, 'through and expect_digest must come from a preview: preview the skip first');
    let done: Awaited<ReturnType<typeof settleSkip>>;
    try {
      done = await settleSkip({ ...target(consumer, key), pool: d.pool, through, expect: { digest }, actor: who, via: 'console' }).finally(
        d.changed,
      );
    } catch (err) {
      if (!(err instanceof SelectionChangedError)) throw err;
      r.status = 409;
      return previewPage(r, consumer, key, undefined, err.message);
    }
    const s = done.done;
    const body = html`<p id="result">Skipped version(s) <b id="done">${s.from}..${s.through}</b> of key <b>${key}</b> (consumer ${consumer}): it is at version ${s.recorded} now; its stored and parked later versions apply in order (${s.woken} parked event(s) made due now).</p>
${done.notRecorded ? html`<p class="advice">Not recorded in the audit trail: ${done.notRecorded}</p>` : ''}<p><a href="/parked${qs({ consumer, key })}">Parked events of ${key}</a> · <a href="/versions${qs({ key, consumer })}">Inbox versions</a> · <a href="/audit">Audit trail</a></p>`;
    return d.layout(r, 'Done', '/parked', body);
  }

  return { stuckSection, skipForm, preview, apply };
}
