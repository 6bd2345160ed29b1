import { quoteIdentifier } from '@ferry/core';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import type pg from 'pg';
import { recordAction } from '../actions/audit.js';
import {
  applyStreamPlan,
  checkStreamSpec,
  describePlan,
  planChanges,
  planSubject,
  type StreamPlan,
  subjectCovers,
} from '../actions/streams.js';
import type { DoctorReport } from '../commands/doctor.js';
import { type Html, html, qs } from './html.js';
import { HttpError, type PageKit, type Req } from './page-kit.js';

// /streams: the streams and consumers this schema's events go to (a toggle shows every one on the
// server), adding a subject to a stream with a preview and an audit record, and ferry doctor. The
// overview's consumer table is read here too.

/** Rows the lists show at most. */
const LIST_LIMIT = 200;
/** Streams read from the server at most. */
const STREAMS_READ = 50;
/** The newest outbox rows whose subjects say which streams are this schema's. */
const SUBJECT_ROWS = 100_000;
/** A consumer this far behind is flagged (on this schema's streams only). */
const LAG_FLAGGED = 1_000;

export interface StreamRow {
  name: string;
  subjects: string[];
  messages: number;
  bytes: number;
  consumers: number;
  /** It binds one of this schema's subjects. */
  ours: boolean;
}

export interface LagRow {
  stream: string;
  consumer: string;
  pending: number;
  ackPending: number;
  redelivered: number;
  ours: boolean;
}

export interface NatsView {
  rows: LagRow[];
  streams: StreamRow[];
  error?: string;
}

export interface StreamsOptions {
  pool: pg.Pool;
  longPool: pg.Pool;
  schema: string;
  nc?: NatsConnection;
  natsError?: string;
  refreshMs: number;
  doctor?: () => Promise<DoctorReport>;
}

export function streamsConsole(o: StreamsOptions, kit: PageKit) {
  const s = quoteIdentifier(o.schema);
  let subjects: { at: number; value: Promise<string[]> } | undefined;

  /** The subjects of the schema's newest rows: what makes a stream this schema's. Read at most once a minute. */
  function ownSubjects(): Promise<string[]> {
    if (!subjects || Date.now() - subjects.at >= Math.max(60_000, o.refreshMs)) {
      const value = o.pool
        .query<{ subject: string }>(
          `SELECT DISTINCT subject FROM (SELECT subject FROM ${s}.outbox ORDER BY seq DESC LIMIT ${SUBJECT_ROWS}) x LIMIT 1000`,
        )
        .then((r) => r.rows.map((x) => x.subject));
      subjects = { at: Date.now(), value };
      value.catch(() => {
        subjects = undefined;
      });
    }
    return subjects.value;
  }

  async function natsView(): Promise<NatsView> {
    if (!o.nc) return { rows: [], streams: [], error: o.natsError ?? 'not connected (ferry console --nats-url)' };
    try {
      const own = await ownSubjects().catch(() => [] as string[]);
      const jsm = await jetstreamManager(o.nc, { timeout: 2000 });
      const rows: LagRow[] = [];
      const streams: StreamRow[] = [];
      for await (const si of jsm.streams.list()) {
        if (streams.length >= STREAMS_READ) break;
        const filters = si.config.subjects ?? [];
        const ours = own.some((subject) => filters.some((f) => subjectCovers(f, subject)));
        streams.push({
          name: si.config.name,
          subjects: filters,
          messages: si.state.messages,
          bytes: si.state.bytes,
          consumers: si.state.consumer_count,
          ours,
        });
        for await (const ci of jsm.consumers.list(si.config.name)) {
          if (rows.length >= LIST_LIMIT) break;
          rows.push({
            stream: si.config.name,
            consumer: ci.name,
            pending: ci.num_pending,
            ackPending: ci.num_ack_pending,
            redelivered: ci.num_redelivered,
            ours,
          });
        }
      }
      return { rows, streams };
    } catch (err) {
      return { rows: [], streams: [], error: (err as Error).message };
    }
  }

  /** "Only this schema's" or "every stream on the server", as a link to the other. */
  function scopeLine(path: string, view: NatsView, all: boolean, extra: Record<string, string> = {}): Html {
    const others = view.streams.filter((x) => !x.ours).length;
    return all
      ? html`<p class="note" id="scope">Every stream and consumer on the server. <a href="${path}${qs({ ...extra })}">Only the streams of schema ${o.schema}</a></p>`
      : html`<p class="note" id="scope">The streams that bind schema ${o.schema}'s subjects and their consumers${others > 0 ? ` (${others} other stream(s) hidden)` : ''}. <a href="${path}${qs({ ...extra, all: '1' })}">Show every stream and consumer</a></p>`;
  }

  /** The overview's consumer table: lag flagged on this schema's consumers only. */
  function consumersSection(view: NatsView, all: boolean): Html {
    const rows = view.rows.filter((c) => all || c.ours);
    return html`${scopeLine('/', view, all)}${
      rows.length === 0
        ? html`<p class="note" id="no-consumers">${view.error ? 'Unavailable.' : 'No consumers.'}</p>`
        : html`<table class="consumers"><tr><th>stream</th><th>consumer</th><th>lag (num_pending)</th><th>ack pending</th><th>redelivered</th></tr>${rows.map(
            (c) =>
              html`<tr data-stream="${c.stream}" class="${c.ours && c.pending > LAG_FLAGGED ? 'bad' : ''}"><td>${c.stream}</td><td>${c.consumer}</td><td class="n">${c.pending}</td><td class="n">${c.ackPending}</td><td class="n">${c.redelivered}</td></tr>`,
          )}</table>`
    }`;
  }

  function addSubjectForm(r: Req, stream: string, subject: string): Html | string {
    if (!kit.canAct(r)) return '';
    return html`<form class="inline" method="post" action="/streams/preview">${kit.csrfField(r)}<input type="hidden" name="stream" value="${stream}"><input name="subject" value="${subject}" placeholder="orders.paid" aria-label="subject to add to ${stream}"><button type="submit" data-action="add-subject">Add subject…</button></form>`;
  }

  async function streamsPage(r: Req): Promise<string> {
    const all = r.url.searchParams.get('all') === '1';
    // ?subject=X (from a "no stream binds X" fix): the add-subject fields start with it.
    const wanted = r.url.searchParams.get('subject') ?? '';
    const view = await natsView();
    const report = o.doctor ? await o.doctor().catch((err: Error) => err) : undefined;
    const shown = view.streams.filter((x) => all || x.ours);
    const consumers = view.rows.filter((c) => all || c.ours);
    const extra: Record<string, string> = wanted ? { subject: wanted } : {};
    const newStream = kit.canAct(r)
      ? html`<h3>A new stream</h3><form class="inline" method="post" action="/streams/preview">${kit.csrfField(r)}<input name="stream" placeholder="ORDERS" aria-label="new stream name"><input name="subject" value="${wanted}" placeholder="orders.>" aria-label="its subject"><button type="submit" data-action="new-stream">Create…</button></form>`
      : '';
    const body = html`<h2>Streams</h2>${
      view.error
        ? html`<p class="advice">NATS: ${view.error}</p>`
        : html`${scopeLine('/streams', view, all, extra)}${
            shown.length === 0
              ? html`<p class="note" id="no-streams">No stream binds a subject of schema ${o.schema}'s newest events${view.streams.length > 0 ? ' (see every stream above)' : ''}.</p>`
              : html`<table class="streams"><tr><th>stream</th><th>subjects</th><th>messages</th><th>bytes</th><th>consumers</th><th></th></tr>${shown.map(
                  (st) =>
                    html`<tr data-stream="${st.name}"><td>${st.name}</td><td>${st.subjects.join(', ')}</td><td class="n">${st.messages}</td><td class="n">${st.bytes}</td><td class="n">${st.consumers}</td><td>${addSubjectForm(r, st.name, wanted)}</td></tr>`,
                )}</table>`
          }${newStream}
<h2>Consumers</h2><table><tr><th>stream</th><th>consumer</th><th>lag</th><th>ack pending</th><th>redelivered</th></tr>${consumers.map(
            (c) =>
              html`<tr><td>${c.stream}</td><td>${c.consumer}</td><td class="n">${c.pending}</td><td class="n">${c.ackPending}</td><td class="n">${c.redelivered}</td></tr>`,
          )}</table>`
    }
<h2>ferry doctor</h2>${
      report === undefined
        ? html`<p class="note">Not available here.</p>`
        : report instanceof Error
          ? html`<p class="advice">${report.message}</p>`
          : html`<p>${report.problems} problem(s), ${report.warnings} warning(s).</p><table class="findings"><tr><th>check</th><th>status</th><th>finding</th><th>fix</th></tr>${report.findings.map(
              (f) =>
                html`<tr class="${f.status === 'problem' ? 'bad' : f.status === 'warning' ? 'warn' : ''}"><td>${f.check}</td><td>${f.status}</td><td>${f.message}</td><td>${f.fix ?? ''}</td></tr>`,
            )}</table>`
    }`;
    return kit.layout(r, 'Streams, consumers and doctor', '/streams', body);
  }

  /** The stream and subject a form names, checked as `ferry streams ensure NAME=SUBJECT` checks them. */
  function formSpec(form: URLSearchParams): { stream: string; subject: string } {
    const stream = (form.get('stream') ?? '').trim();
    const subject = (form.get('subject') ?? '').trim();
    try {
      const spec = checkStreamSpec(`${stream}=${subject}`);
      return { stream: spec.name, subject: spec.subjects[0] as string };
    } catch (err) {
      throw new HttpError(400, (err as Error).message);
    }
  }

  function requireNats(): NatsConnection {
    if (!o.nc) throw new HttpError(503, `cannot change streams: ${o.natsError ?? 'not connected to NATS (ferry console --nats-url)'}`);
    return o.nc;
  }

  async function plan(stream: string, subject: string): Promise<{ plan: StreamPlan; heldBy: string | null }> {
    return planSubject(await jetstreamManager(requireNats(), { timeout: 5000 }), stream, subject);
  }

  /** What the stream's subjects were when previewed: the confirmation changes nothing if they differ. */
  const subjectsNow = (p: StreamPlan) => JSON.stringify(p.info ? (p.info.config.subjects ?? []) : null);

  async function previewPage(r: Req, stream: string, subject: string, refused?: string): Promise<string> {
    const { plan: p, heldBy } = await plan(stream, subject);
    const notice = refused
      ? html`<p class="advice" id="error">${refused}</p><p class="note" id="changed">Nothing was done. This is the new preview.</p>`
      : '';
    let body: Html;
    if (heldBy !== null) {
      body = html`${notice}<p class="advice" id="held">Stream ${heldBy} already binds ${subject}: JetStream refuses two streams with overlapping subjects, so ${stream} cannot take it. Events on ${subject} already go to ${heldBy}.</p><p><a href="/streams">Back</a></p>`;
    } else if (!planChanges(p)) {
      body = html`${notice}<p class="note" id="summary">${describePlan(p)}: nothing to do.</p><p><a href="/streams">Back</a></p>`;
    } else {
      body = html`${notice}<div class="preview"><p id="summary">${describePlan(p)}.</p>
<p class="note">The same change as <span class="mono">ferry streams ensure ${stream}=${subject}</span>: subjects are only added, never removed. Events on ${subject} that no stream bound (backing off, or dead) go through at their next attempt, or at once with a retry from Blocked keys.</p>
<form method="post" action="/streams/apply">${kit.csrfField(r)}<input type="hidden" name="stream" value="${stream}"><input type="hidden" name="subject" value="${subject}"><input type="hidden" name="expect_subjects" value="${subjectsNow(p)}">
<button id="confirm" type="submit">${p.info ? `Add ${subject} to ${stream}` : `Create ${stream}`}</button> <a href="/streams">Cancel</a></form></div>`;
    }
    return kit.layout(r, `Preview: ${p.info ? 'add a subject' : 'create a stream'}`, '/streams', body);
  }

  async function streamsPreview(r: Req, form: URLSearchParams): Promise<string> {
    kit.checkAction(r, form);
    const { stream, subject } = formSpec(form);
    return previewPage(r, stream, subject);
  }

  async function streamsApply(r: Req, form: URLSearchParams): Promise<string> {
    const who = kit.checkAction(r, form);
    const { stream, subject } = formSpec(form);
    const expected = form.get('expect_subjects');
    if (expected === null) throw new HttpError(400, 'expect_subjects must come from a preview: preview the change first');
    const { plan: p, heldBy } = await plan(stream, subject);
    if (subjectsNow(p) !== expected || heldBy !== null) {
      r.status = 409;
      return previewPage(r, stream, subject, `Stream ${stream} changed since your preview (its subjects were ${expected}).`);
    }
    const entry = {
      actor: who,
      via: 'console' as const,
      action: 'streams.ensure' as const,
      filter: { stream, subjects: [subject], created: !p.info, added: p.add },
    };
    try {
      await applyStreamPlan(await jetstreamManager(requireNats(), { timeout: 5000 }), p, { option: 'subject', prefix: 'console' });
    } catch (err) {
      await recordAction(o.longPool, s, { ...entry, rows: 0, outcome: (err as Error).message }).catch(() => {});
      throw new HttpError(409, (err as Error).message);
    }
    await recordAction(o.longPool, s, { ...entry, rows: p.add.length, outcome: 'ok' });
    const body = html`<p id="result">${describePlan(p, true)}.</p><p><a href="/streams">Streams</a> · <a href="/blocked">Blocked keys</a> · <a href="/audit">Audit trail</a></p>`;
    return kit.layout(r, p.info ? 'Subject added' : 'Stream created', '/streams', body);
  }

  return { natsView, consumersSection, streamsPage, streamsPreview, streamsApply };
}

export type StreamsConsole = ReturnType<typeof streamsConsole>;
