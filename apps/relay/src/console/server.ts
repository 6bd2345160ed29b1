import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { isValidationError, OLD_BOSS_SCHEMA, pgBossDb, quoteIdentifier, startPgBoss } from '@ferry/core';
import { findParkedElsewhere } from '@ferry/inbox';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import type pg from 'pg';
import { PgBoss } from 'pg-boss';
import { listActions } from '../actions/audit.js';
import { EVENT_STATES, type EventFilter, parseFilter } from '../actions/event-filter.js';
import { type FailedAction, previewFailed, SelectionChangedError, settleFailed } from '../actions/failed.js';
import { type ParkedAction, parkedEligible, settleParked } from '../actions/parked.js';
import { previewReplay, type ReplaySelection, replayEvents } from '../actions/replay.js';
import { parseDigest, selectionOfSet } from '../actions/selection.js';
import { describeRelayBeforeLeases, describeRelease } from '../cli/relay-instances.js';
import type { DoctorReport } from '../commands/doctor.js';
import { readStatus, type StatusReport } from '../commands/status.js';
import { isLoopbackAddress, misdirectedHost } from '../loopback-host.js';
import { showEventSql } from '../sql/show-event.js';
import { CONSOLE_CSS, CONSOLE_JS } from './assets.js';
import { MinuteHistory, minuteCharts } from './charts.js';
import { ago, esc, Html, hiddenField, html, iso, qs, readForm, showPayload } from './html.js';
import {
  type BlockedRow,
  blockedKeys,
  bossJobTable,
  type EventRow,
  failureGroups,
  GROUPED_ROWS,
  inboxVersions,
  keyHistory,
  type MinuteStat,
  type ParkedCount,
  type ParkedRow,
  parkedCounts,
  parkedEvents,
  searchEvents,
} from './queries.js';
import { skipPages } from './skip-pages.js';

/** How `ferry console` is reached and what it may do. */
export interface ConsoleOptions {
  /** A pool whose connections carry a statement_timeout (the CLI sets one). */
  pool: pg.Pool;
  /**
   * For the overview's exact counts (`ferry status`'s, read once per refresh for every viewer) and for
   * the actions' previews and changes, which may cover 100,000 rows: a longer statement_timeout than
   * the pages' own. Default `pool`.
   */
  longPool?: pg.Pool;
  schema: string;
  /** The inbox's pg-boss schema (its parking lot). */
  bossSchema: string;
  /** Where earlier inbox releases parked (default `pgboss`): the Parked page names events left there. `false`: do not look. */
  oldBossSchema?: string | false;
  /** JetStream for streams, consumers and their lag; without it those sections say why. */
  nc?: NatsConnection;
  natsError?: string;
  host: string;
  port: number;
  /** No action is offered and none accepted (works with `ferry migrate --print-grants --for console`). */
  readOnly: boolean;
  /** Bearer token (header) or login-form secret. */
  token?: string;
  basic?: { user: string; password: string };
  /** How often the overview refreshes itself. */
  refreshMs: number;
  /**
   * A shared read (the overview's status, its chart, the blocked keys) is read again after the refresh
   * interval or `pace` times as long as it last took, whichever is longer (default 150: each takes at
   * most 1/150 of a database connection's time, however large the outbox and however many tabs).
   */
  pace?: number;
  /** `ferry doctor`'s findings, run on demand by the streams page. */
  doctor?: () => Promise<DoctorReport>;
}

export interface ConsoleServer {
  url: string;
  server: Server;
  close(): Promise<void>;
}

/** Rows each list shows at most. */
const LIST_LIMIT = 200;
/**
 * A shared read is read again after PACE times its own duration at the soonest (`pace` option): each
 * of the three (the overview's status, its per-minute chart, the blocked keys) then takes at most 1/150
 * of a database connection's time, 2 % together, however large the outbox and however many tabs are open.
 */
const PACE = 150;
/** Failure groups the blocked keys page shows at most. */
const GROUPS_SHOWN = 20;
/** Events one console replay sends at most (it answers when done); more is `ferry replay`'s job. */
const REPLAY_MAX = 100_000;
/** Payload bytes read for one event (the rest is counted, not loaded). */
const PAYLOAD_BYTES = 64 * 1024;
const BODY_LIMIT = 64 * 1024;
const SESSION_MS = 12 * 3600_000;

const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

const digest = (s: string) => createHash('sha256').update(s).digest();
const sameSecret = (a: string, b: string) => timingSafeEqual(digest(a), digest(b));

interface Req {
  req: IncomingMessage;
  url: URL;
  who: string | null;
  csrf: string;
  /** The answer's status when not 200 (a refused confirmation that shows the new preview: 409). */
  status?: number;
}

/** The console's pages and actions, for an HTTP server of its own or the relay's (`ferry relay --console`). */
export type ConsoleHandler = (req: IncomingMessage, res: ServerResponse) => void;

/** The paths the console serves: what `ferry relay --console` hands it on the relay's HTTP port. */
export const CONSOLE_PATHS = new Set([
  '/',
  '/blocked',
  '/events',
  '/event',
  '/parked',
  '/versions',
  '/streams',
  '/audit',
  '/login',
  '/console.css',
  '/console.js',
  '/favicon.ico',
  '/dlq/preview',
  '/dlq/apply',
  '/parked/preview',
  '/parked/apply',
  '/skip/preview',
  '/skip/apply',
  '/replay/preview',
  '/replay/apply',
]);

/** Starts the console's HTTP server; resolves once it listens. */
export async function startConsole(o: ConsoleOptions): Promise<ConsoleServer> {
  const server = createServer(consoleHandler(o));
  server.headersTimeout = 10_000;
  server.requestTimeout = 30_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port, o.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const addr = server.address() as AddressInfo;
  const shownHost = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  return {
    url: `http://${shownHost}:${addr.port}`,
    server,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** The console's request handler; `o.host` is the address it is reached on (loopback or not decides who reads). */
export function consoleHandler(o: Omit<ConsoleOptions, 'port'>): ConsoleHandler {
  const secret = randomBytes(32);
  const sessions = new Map<string, { who: string; until: number }>();
  const s = quoteIdentifier(o.schema);
  const credentials = o.token !== undefined || o.basic !== undefined;
  const loopback = isLoopbackAddress(o.host);

  const csrfFor = (who: string | null) =>
    createHmac('sha256', secret)
      .update(`csrf:${who ?? ''}`)
      .digest('hex');

  function principal(req: IncomingMessage): string | null {
    const auth = req.headers.authorization ?? '';
    if (o.token !== undefined && /^Bearer /i.test(auth) && sameSecret(auth.slice(7).trim(), o.token)) return 'token';
    if (o.basic && /^Basic /i.test(auth)) {
      const [user, ...rest] = Buffer.from(auth.slice(6).trim(), 'base64').toString('utf8').split(':');
      if (sameSecret(user ?? '', o.basic.user) && sameSecret(rest.join(':'), o.basic.password)) return o.basic.user;
    }
    const sid = /(?:^|;\s*)ferry_console=([A-Za-z0-9_-]{20,})/.exec(req.headers.cookie ?? '')?.[1];
    const session = sid ? sessions.get(sid) : undefined;
    if (session && session.until > Date.now()) return session.who;
    return null;
  }

  /** Not a cross-site request: the Origin (or Referer) is the console's own, and the browser did not say cross-site. */
  function sameOrigin(req: IncomingMessage): boolean {
    const expected = `http://${req.headers.host ?? ''}`;
    const site = req.headers['sec-fetch-site'];
    if (site !== undefined && site !== 'same-origin' && site !== 'none') return false;
    const origin = req.headers.origin;
    if (origin !== undefined) return origin === expected;
    const referer = req.headers.referer;
    return referer !== undefined && (referer === expected || referer.startsWith(`${expected}/`));
  }

  function checkAction(r: Req, form: URLSearchParams): string {
    if (o.readOnly) throw new HttpError(403, 'this console is read-only (--read-only): it takes no actions');
    if (r.who === null)
      throw new HttpError(
        403,
        credentials
          ? 'actions need the console token or credentials: log in first'
          : 'actions need credentials: start ferry console with --token-file or --basic-auth-file',
      );
    if (!sameOrigin(r.req)) throw new HttpError(403, 'cross-origin request refused');
    const token = form.get('csrf') ?? '';
    if (!sameSecret(token, r.csrf)) throw new HttpError(403, 'missing or wrong CSRF token: reload the page and try again');
    return r.who;
  }

  const csrfField = (r: Req) => html`<input type="hidden" name="csrf" value="${r.csrf}">`;
  const canAct = (r: Req) => !o.readOnly && r.who !== null;

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
    const who = r.who === null ? (credentials ? html`<a href="/login">log in</a>` : 'no credentials configured') : html`as ${r.who}`;
    return `<!doctype html>${html`<html lang="en"><head><meta charset="utf-8"><title>${title} · Ferry console</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="stylesheet" href="/console.css"><script src="/console.js" defer></script></head>
<body><header><strong>Ferry</strong> <span class="mono">${o.schema}</span> ${nav}<span class="who">${o.readOnly ? 'read-only · ' : ''}${who} <span id="stamp"></span></span></header>
<main><h1>${title}</h1>${body}</main></body></html>`}`;
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
    html`<tr data-id="${e.id}"><td class="n">${e.seq}</td><td>${eventLink(e.id)}</td><td>${keyLink(e.key)}</td><td class="n">${e.version}</td><td>${e.subject}</td><td>${e.type}</td><td class="${e.state === 'dead' || e.state === 'backing-off' ? 'bad' : ''}">${e.state}</td><td class="n">${e.attempts}</td><td>${iso(e.created_at)}</td><td>${e.last_error ?? ''}</td></tr>`,
)}</table>`;
  }

  // ---- pages ----

  // The overview's numbers: `ferry status`'s exact counts over every pending row (seconds at a million
  // rows), so read by one reader for every viewer, at most once per refresh interval and only while
  // someone looks; a page is a read of the last snapshot, however many tabs refresh.
  interface Snapshot {
    at: number;
    status?: StatusReport;
    parked: ParkedCount[];
    jobTable: string | null;
    lag: Awaited<ReturnType<typeof consumerLag>>;
    minutes: MinuteStat[];
    /** The newest whole minute the chart read (the overview's "published, last full minute"). */
    lastMinute?: MinuteStat;
    /** How long its database reads took (the status, the parked counts): the next one waits PACE times as long (see `paced`). */
    tookMs: number;
    error?: string;
  }
  let snapshot: Snapshot | undefined;
  let reading: Promise<Snapshot> | undefined;
  const longPool = o.longPool ?? o.pool;
  /**
   * When a shared read is read again: after the refresh interval, or PACE times as long as the read
   * took, whichever is longer. The console then spends at most 1/PACE of a connection's time on it,
   * however large the outbox (a status over a million pending rows takes seconds) and however many
   * tabs are open, so the relays it watches keep their speed.
   */
  const pace = o.pace ?? PACE;
  const paced = (tookMs: number) => Math.max(o.refreshMs, pace * tookMs);
  const history = new MinuteHistory(longPool, o.schema, 3 * o.refreshMs, pace);
  const readMinutes = async (): Promise<MinuteStat[]> => {
    const { rows } = await o.pool.query<{ now: Date }>('SELECT now() AS now');
    return history.read((rows[0]?.now ?? new Date()).getTime());
  };
  function readSnapshot(): Promise<Snapshot> {
    reading ??= (async () => {
      const at = Date.now();
      // Paced by the time of the status read alone: the database's work, which grows with the outbox.
      // The consumers' lag is NATS's (and a shared server's slow answer must not make the numbers
      // stale); the charts pace themselves.
      let statusMs = 0;
      try {
        const [status, jobTable, lag, minutes] = await Promise.all([
          readStatus(longPool, o.schema, { publishedLastMinute: false }).finally(() => {
            statusMs = Date.now() - at;
          }),
          bossJobTable(o.pool, o.bossSchema),
          consumerLag(),
          // The charts are not worth a failed overview: on an error they keep the last minutes read.
          readMinutes().catch(() => snapshot?.minutes ?? []),
        ]);
        const parkedAt = Date.now();
        const parked = jobTable ? await parkedCounts(o.pool, jobTable) : [];
        const lastMinute = history.newestFinal;
        snapshot = {
          at,
          tookMs: statusMs + (Date.now() - parkedAt),
          status,
          parked,
          jobTable,
          lag,
          minutes,
          ...(lastMinute ? { lastMinute } : {}),
        };
      } catch (err) {
        snapshot = {
          ...(snapshot ?? { parked: [], jobTable: null, lag: { rows: [], streams: [] }, minutes: [] }),
          at,
          tookMs: Date.now() - at,
          error: (err as Error).message,
        };
      }
      return snapshot;
    })().finally(() => {
      reading = undefined;
    });
    return reading;
  }
  async function currentSnapshot(): Promise<Snapshot> {
    if (!snapshot) return readSnapshot();
    if (Date.now() - snapshot.at >= paced(snapshot.tookMs)) void readSnapshot();
    return snapshot;
  }

  /** How long a page waits for the first snapshot before it shows a placeholder that fills in by itself. */
  const FIRST_READ_WAIT_MS = 400;

  async function overviewFragment(): Promise<Html> {
    const snap = snapshot
      ? await currentSnapshot()
      : await Promise.race([
          readSnapshot(),
          new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), FIRST_READ_WAIT_MS).unref()),
        ]);
    if (!snap)
      return html`<p class="note" id="reading">Reading the numbers: the exact counts run over every pending row and take seconds at a million rows. This page fills in by itself.</p>`;
    const { status, parked, jobTable, lag, minutes, lastMinute } = snap;
    const stamp = html`<p class="note" id="asof" data-age-ms="${Date.now() - snap.at}">Numbers as of ${new Date(snap.at).toISOString()} (read for every viewer once per ${(paced(snap.tookMs) / 1000).toFixed(paced(snap.tookMs) < 10_000 ? 1 : 0)} s: the refresh interval, or ${pace}× the last read's ${snap.tookMs} ms).</p>`;
    if (!status) return html`<p class="advice">Cannot read the status: ${snap.error ?? 'not read yet'}</p>${stamp}`;
    const advice: Html[] = [];
    if (snap.error) advice.push(html`<p class="advice">The last status read failed (these numbers are older): ${snap.error}</p>`);
    if (status.dead > 0)
      advice.push(
        html`<p class="advice">${status.dead} dead event(s) block their keys: open <a href="/blocked">Blocked keys</a>, fix the cause (<a href="/streams">ferry doctor</a>), then retry or discard them.</p>`,
      );
    if (status.unownedLanesWithBacklog.length > 0)
      advice.push(
        html`<p class="advice">Lanes ${status.unownedLanesWithBacklog.join(', ')} have pending events and no live relay: start ferry relay.</p>`,
      );
    const overdue = status.lanes.filter((l) => l.overdue);
    if (overdue.length > 0)
      advice.push(
        html`<p class="advice">${overdue.length} lane lease(s) overdue (owner frozen, cut off or stuck): a live relay takes them on its next poll; check that relay.</p>`,
      );
    if (status.oldestPendingSeconds > 60)
      advice.push(
        html`<p class="advice">The oldest pending event is ${ago(status.oldestPendingSeconds)} old: are the relays running and NATS reachable?</p>`,
      );
    for (const p of parked.filter((x) => x.failed > 0))
      advice.push(
        html`<p class="advice">Consumer ${p.consumer} has ${p.failed} failed parked event(s) holding their keys: <a href="/parked${qs({ consumer: p.consumer })}">retry or discard them</a>.</p>`,
      );
    if (lag.error) advice.push(html`<p class="advice">NATS: ${lag.error}</p>`);
    const card = (label: string, value: string | number, bad = false) =>
      html`<div class="card${bad ? new Html(' bad') : ''}" data-card="${label}"><b>${value}</b>${label}</div>`;
    return html`${advice}
<div class="cards">${card('pending', status.pending)}${card('oldest pending', ago(status.oldestPendingSeconds), status.oldestPendingSeconds > 60)}${card('dead', status.dead, status.dead > 0)}${card('blocked keys', status.blockedKeys, status.blockedKeys > 0)}${card('published, last full minute', lastMinute?.published ?? '–')}${card('relays', status.instances.length, status.instances.length === 0 && status.pending > 0)}</div>
${minuteCharts(minutes)}
<h2>Relays</h2>
${
  status.instances.length === 0
    ? html`<p class="note">No live relay instance.</p>`
    : html`<table><tr><th>instance</th><th>release</th><th>where</th><th>since</th><th>lanes</th></tr>${status.instances.map(
        (i) =>
          html`<tr><td class="mono">${i.instance}</td><td${i.belowFloor ? new Html(' class="bad"') : ''}>${describeRelease(i)}${i.belowFloor ? ': below the relay floor, stop it' : ''}</td><td>${i.relayPid === null ? `backend pid ${i.pid}` : `pid ${i.relayPid} on ${i.host ?? '?'}`}</td><td>${i.since ?? '-'}</td><td>${i.lanes.join(', ') || '(none)'}</td></tr>`,
      )}</table>`
}${status.mixedReleases === null ? '' : html`<p class="note">Relays run different releases: ${status.mixedReleases}. Upgrades stop, migrate, start (docs/operations.md).</p>`}${status.relaysBeforeLeases.map(
  (r) => html`<p class="note">A relay from before lane leases holds lanes by advisory lock: ${describeRelayBeforeLeases(r)}. Stop it.</p>`,
)}
<h2>Lanes</h2>
<table><tr><th>lane</th><th>pending</th><th>dead</th><th>oldest pending</th><th>owner</th><th>lease age</th><th>epoch</th></tr>${status.lanes.map(
      (l) =>
        html`<tr class="${l.overdue || (l.pending > 0 && l.owner === null) ? 'bad' : ''}"><td class="n">${l.lane}</td><td class="n">${l.pending}</td><td class="n${l.dead > 0 ? new Html(' bad') : ''}">${l.dead}</td><td>${ago(l.oldestPendingSeconds)}</td><td class="mono">${l.owner ?? '-'}</td><td>${l.leaseAgeSeconds === null ? '-' : ago(l.leaseAgeSeconds)}${l.overdue ? ' OVERDUE' : ''}</td><td class="n">${l.epoch}</td></tr>`,
    )}</table>
<h2>Blocked keys</h2>
${
  status.blocked.length === 0
    ? html`<p class="note">None.</p>`
    : html`<table><tr><th>key</th><th>head</th><th>state</th><th>reason</th><th>waiting behind</th></tr>${status.blocked.map(
        (b) =>
          html`<tr class="bad"><td>${keyLink(b.key)}</td><td>${eventLink(b.id)} v${b.version}</td><td>${b.state === 'dead' ? 'dead' : `backing off, attempt ${b.attempts}, next ${b.nextAttemptAt}`}</td><td>${b.reason ?? ''}</td><td class="n">${b.waiting}</td></tr>`,
      )}</table>${status.blockedKeys > status.blocked.length ? html`<p><a href="/blocked">All ${status.blockedKeys} blocked keys</a></p>` : ''}`
}
<h2>Parked events per consumer</h2>
${
  jobTable === null
    ? html`<p class="note">No inbox parking lot in schema ${o.bossSchema} (--boss-schema).</p>`
    : parked.length === 0
      ? html`<p class="note">None.</p>`
      : html`<table><tr><th>consumer</th><th>parked</th><th>failed (holding their keys)</th></tr>${parked.map(
          (p) =>
            html`<tr class="${p.failed > 0 ? 'bad' : ''}"><td><a href="/parked${qs({ consumer: p.consumer })}">${p.consumer}</a></td><td class="n">${p.live}</td><td class="n">${p.failed}</td></tr>`,
        )}</table>`
}
<h2>Consumers (JetStream)</h2>
${
  lag.rows.length === 0
    ? html`<p class="note">${lag.error ? 'Unavailable.' : 'No consumers.'}</p>`
    : html`<table><tr><th>stream</th><th>consumer</th><th>lag (num_pending)</th><th>ack pending</th><th>redelivered</th></tr>${lag.rows.map(
        (c) =>
          html`<tr class="${c.pending > 1000 ? 'bad' : ''}"><td>${c.stream}</td><td>${c.consumer}</td><td class="n">${c.pending}</td><td class="n">${c.ackPending}</td><td class="n">${c.redelivered}</td></tr>`,
      )}</table>`
}${stamp}`;
  }

  interface LagRow {
    stream: string;
    consumer: string;
    pending: number;
    ackPending: number;
    redelivered: number;
  }

  async function consumerLag(): Promise<{
    rows: LagRow[];
    error?: string;
    streams: Array<{ name: string; subjects: string[]; messages: number; bytes: number; consumers: number }>;
  }> {
    if (!o.nc) return { rows: [], streams: [], error: o.natsError ?? 'not connected (ferry console --nats-url)' };
    try {
      const jsm = await jetstreamManager(o.nc, { timeout: 2000 });
      const rows: LagRow[] = [];
      const streams: Array<{ name: string; subjects: string[]; messages: number; bytes: number; consumers: number }> = [];
      for await (const si of jsm.streams.list()) {
        if (streams.length >= 50) break;
        streams.push({
          name: si.config.name,
          subjects: si.config.subjects ?? [],
          messages: si.state.messages,
          bytes: si.state.bytes,
          consumers: si.state.consumer_count,
        });
        for await (const ci of jsm.consumers.list(si.config.name)) {
          if (rows.length >= LIST_LIMIT) break;
          rows.push({
            stream: si.config.name,
            consumer: ci.name,
            pending: ci.num_pending,
            ackPending: ci.num_ack_pending,
            redelivered: ci.num_redelivered,
          });
        }
      }
      return { rows, streams };
    } catch (err) {
      return { rows: [], streams: [], error: (err as Error).message };
    }
  }

  async function overview(r: Req): Promise<string> {
    if (r.url.searchParams.get('fragment') === '1') return (await overviewFragment()).value;
    return layout(
      r,
      'Overview',
      '/',
      html`<div id="live" data-refresh="/?fragment=1" data-interval="${o.refreshMs}">${await overviewFragment()}</div>`,
    );
  }

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
  const changed = () => {
    blocked = undefined;
    snapshot = undefined;
  };

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
    const replayable = any && f.ids === undefined && (f.state === undefined || f.state === 'published');
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
      ['source', e.source],
      ['content type', e.content_type],
      ['state', state],
      ['attempts', e.attempts],
      ['last error', e.last_error],
      ['occurred', iso(e.occurred_at as Date)],
      ['created', iso(e.created_at as Date)],
      ['dead at', iso(e.dead_at as Date | null)],
      ['published at', iso(e.published_at as Date | null)],
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

  // Keys waiting for a version nothing holds, and their previewed skip (console/skip-pages.ts).
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
  return html`<tr data-job="${p.jobId}"${p.malformed ? new Html(' data-malformed') : ''} class="${p.state === 'failed' ? 'bad' : ''}"><td class="mono">${p.jobId}</td><td>${p.state}</td><td>${key}</td><td class="n">${p.version ?? ''}</td><td>${p.type ?? ''}</td><td class="mono">${p.id ?? ''}</td><td>${p.reason ?? ''}</td><td>${error}${p.lastError ? html`<br>last retry: ${p.lastError}` : ''}</td><td class="n">${p.retryCount}</td><td>${p.parkedAt}</td>
<td>${actions && p.state !== 'active' ? html`${parkedForm(r, consumer, 'retry', [p], 'Retry…')} ${parkedForm(r, consumer, 'discard', [p], 'Discard…')}` : ''}
${message}</td></tr>`;
})}</table>`;
  }

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

  async function streamsPage(r: Req): Promise<string> {
    const lag = await consumerLag();
    const report = o.doctor ? await o.doctor().catch((err: Error) => err) : undefined;
    const body = html`<h2>Streams</h2>${
      lag.error
        ? html`<p class="advice">NATS: ${lag.error}</p>`
        : html`<table><tr><th>stream</th><th>subjects</th><th>messages</th><th>bytes</th><th>consumers</th></tr>${lag.streams.map(
            (st) =>
              html`<tr><td>${st.name}</td><td>${st.subjects.join(', ')}</td><td class="n">${st.messages}</td><td class="n">${st.bytes}</td><td class="n">${st.consumers}</td></tr>`,
          )}</table>
<h2>Consumers</h2><table><tr><th>stream</th><th>consumer</th><th>lag</th><th>ack pending</th><th>redelivered</th></tr>${lag.rows.map(
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
    return layout(r, 'Streams, consumers and doctor', '/streams', body);
  }

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

  // ---- actions ----

  function formFilter(form: URLSearchParams): EventFilter {
    const f = parseFilter(
      Object.fromEntries(['key', 'subject', 'type', 'since', 'until', 'state', 'reason'].map((k) => [k, form.get(k) ?? ''])),
    );
    const ids = form.getAll('id').filter(Boolean);
    if (ids.length > 0) f.ids = ids.map((id) => parseFilter({ id }).ids?.[0] as string);
    return f;
  }

  const failedAction = (form: URLSearchParams): FailedAction => {
    const a = form.get('action');
    if (a !== 'retry' && a !== 'discard') throw new HttpError(400, `action must be retry or discard, got ${JSON.stringify(a)}`);
    return a;
  };

  async function dlqPreview(r: Req, form: URLSearchParams): Promise<string> {
    checkAction(r, form);
    return dlqPreviewPage(r, failedAction(form), formFilter(form));
  }

  /** The preview of a dlq action, and its confirmation form carrying the exact selection; `refused` says why a confirmation was not done. */
  async function dlqPreviewPage(r: Req, action: FailedAction, f: EventFilter, refused?: string): Promise<string> {
    const p = await previewFailed(longPool, o.schema, f);
    const what = f.key !== undefined && p.keys <= 1 ? html` of key <b>${f.key}</b>` : html` of ${p.keys} key(s)`;
    const verb = action === 'retry' ? 'retries' : 'discards';
    const kind =
      p.backingOff === 0
        ? 'dead event(s)'
        : p.dead === 0
          ? 'backing-off event(s)'
          : `failed event(s) (${p.dead} dead, ${p.backingOff} backing off)`;
    const flow = action === 'retry' ? 'row(s) behind them flow once they are published.' : 'row(s) behind them will flow.';
    const hidden = Object.entries({ ...filterFields(f), state: f.state })
      .filter(([k, v]) => v !== undefined && k !== 'id')
      .map(([k, v]) => hiddenField(k, v as string));
    const ids = (f.ids ?? []).map((id) => html`<input type="hidden" name="id" value="${id}">`);
    const notice = refused
      ? html`<p class="advice" id="error">${refused}</p><p class="note" id="changed">The selection changed since your preview: nothing was done. This is the new preview.</p>`
      : '';
    const body =
      p.rows === 0
        ? html`${notice}<p class="note">No failed event (dead or backing off) matches: nothing to ${action}.</p><p><a href="/blocked">Back</a></p>`
        : html`${notice}<div class="preview"><p id="summary">This ${verb} <b id="count">${p.rows}</b> ${kind}${what}; ${p.behindKeys < p.keys ? 'at least ' : ''}<b id="behind">${p.behind}</b> ${flow}${p.behindKeys < p.keys ? ` (counted behind the first ${p.behindKeys} keys)` : ''}</p>
${p.backingOff > 0 ? html`<p class="note">A backing-off event may be on the wire right now: a discard keeps it from being sent again, but one already sent may still reach the stream (before any later event of its key).</p>` : ''}
<p class="note">Filter: <span class="mono">${JSON.stringify({ ...filterFields(f), state: f.state, ids: f.ids })}</span>. Only these ${p.selection.rows} rows change: if the selection differs when you confirm, nothing is done.</p>
<form method="post" action="/dlq/apply">${csrfField(r)}<input type="hidden" name="action" value="${action}">${hidden}${ids}
<input type="hidden" name="expect_rows" value="${p.selection.rows}"><input type="hidden" name="expect_digest" value="${p.selection.digest}">
<button id="confirm" class="danger" type="submit">${action === 'retry' ? 'Retry' : 'Discard'} ${p.selection.rows} event(s)</button> <a href="/blocked">Cancel</a></form></div>
<h2>The first ${p.sample.length}</h2><table><tr><th>id</th><th>key</th><th>version</th><th>subject</th><th>type</th><th>last error</th></tr>${p.sample.map(
            (e) =>
              html`<tr><td>${eventLink(e.id)}</td><td>${e.key}</td><td class="n">${e.version}</td><td>${e.subject}</td><td>${e.type}</td><td>${e.last_error ?? ''}</td></tr>`,
          )}</table>`;
    return layout(r, `Preview: ${action} failed events`, '/blocked', body);
  }

  async function dlqApply(r: Req, form: URLSearchParams): Promise<string> {
    const who = checkAction(r, form);
    const action = failedAction(form);
    const f = formFilter(form);
    const rows = Number(form.get('expect_rows'));
    const digest = parseDigest(form.get('expect_digest'));
    if (!Number.isInteger(rows) || rows < 0 || digest === undefined)
      throw new HttpError(400, 'expect_rows and expect_digest must come from a preview: preview the action first');
    let ids: string[];
    try {
      ids = await settleFailed(longPool, o.schema, action, f, { actor: who, via: 'console', expect: { rows, digest } }).finally(changed);
    } catch (err) {
      if (!(err instanceof SelectionChangedError)) throw err;
      r.status = 409;
      return dlqPreviewPage(r, action, f, err.message);
    }
    const body = html`<p id="result">${action === 'retry' ? 'Retried' : 'Discarded'} <b id="done">${ids.length}</b> event(s); the relays were woken.</p>
<ul>${ids.slice(0, 50).map((id) => html`<li>${eventLink(id)}</li>`)}</ul><p><a href="/blocked">Blocked keys</a> · <a href="/audit">Audit trail</a></p>`;
    return layout(r, 'Done', '/blocked', body);
  }

  /** A replay selection from a form: the events filter's fields (a subject ending in . or > is a prefix) and a seq range. */
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

  // ---- login ----

  function loginPage(r: Req, message = ''): string {
    const fields =
      o.basic !== undefined
        ? html`<label>user <input name="user" autocomplete="username"></label> <label>password <input name="password" type="password" autocomplete="current-password"></label>`
        : html`<label>token <input name="token" type="password" autocomplete="current-password"></label>`;
    return layout(
      r,
      'Log in',
      '',
      html`${message ? html`<p class="advice">${message}</p>` : ''}${credentials ? html`<form method="post" action="/login">${csrfField(r)}${fields} <button type="submit">Log in</button></form>` : html`<p class="note">This console has no credentials configured: it is read-only for everyone (start it with --token-file or --basic-auth-file to act).</p>`}`,
    );
  }

  function login(r: Req, form: URLSearchParams, res: ServerResponse): string | undefined {
    if (!sameOrigin(r.req)) throw new HttpError(403, 'cross-origin request refused');
    if (!sameSecret(form.get('csrf') ?? '', r.csrf)) throw new HttpError(403, 'missing or wrong CSRF token: reload the page and try again');
    let who: string | null = null;
    if (o.token !== undefined && sameSecret(form.get('token') ?? '', o.token)) who = 'token';
    if (o.basic && sameSecret(form.get('user') ?? '', o.basic.user) && sameSecret(form.get('password') ?? '', o.basic.password))
      who = o.basic.user;
    if (who === null) {
      res.statusCode = 403;
      return loginPage(r, 'Wrong credentials.');
    }
    const sid = randomBytes(24).toString('base64url');
    const now = Date.now();
    for (const [k, v] of sessions) if (v.until <= now) sessions.delete(k); // expired sessions go at the next login
    sessions.set(sid, { who, until: now + SESSION_MS });
    res.setHeader('set-cookie', `ferry_console=${sid}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${SESSION_MS / 1000}`);
    res.statusCode = 303;
    res.setHeader('location', '/');
    return undefined;
  }

  // ---- dispatch ----

  async function readBody(req: IncomingMessage): Promise<URLSearchParams> {
    const type = req.headers['content-type'] ?? '';
    if (!/^application\/x-www-form-urlencoded\b/i.test(type)) throw new HttpError(415, 'send a form (application/x-www-form-urlencoded)');
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const c of req) {
      size += (c as Buffer).length;
      if (size > BODY_LIMIT) throw new HttpError(413, `form larger than ${BODY_LIMIT} bytes`);
      chunks.push(c as Buffer);
    }
    return readForm(Buffer.concat(chunks).toString('utf8'));
  }

  const GET: Record<string, (r: Req) => Promise<string>> = {
    '/': overview,
    '/blocked': blockedPage,
    '/events': eventsPage,
    '/event': eventPage,
    '/parked': parkedPage,
    '/versions': versionsPage,
    '/streams': streamsPage,
    '/audit': auditPage,
  };
  const POST: Record<string, (r: Req, form: URLSearchParams) => Promise<string>> = {
    '/dlq/preview': dlqPreview,
    '/dlq/apply': dlqApply,
    '/parked/preview': parkedPreview,
    '/parked/apply': parkedApply,
    '/skip/preview': skip.preview,
    '/skip/apply': skip.apply,
    '/replay/preview': replayPreview,
    '/replay/apply': replayApply,
  };

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    res.setHeader('content-security-policy', CSP);
    res.setHeader('x-content-type-options', 'nosniff');
    res.setHeader('x-frame-options', 'DENY');
    res.setHeader('referrer-policy', 'same-origin');
    res.setHeader('cache-control', 'no-store');
    const url = new URL(req.url ?? '/', 'http://console.invalid');
    // DNS rebinding: on a loopback bind, only a loopback name and this port name this console.
    const misdirected = loopback ? misdirectedHost(req.headers.host, req.socket.localPort ?? 0) : undefined;
    if (misdirected !== undefined) throw new HttpError(421, misdirected);
    if (req.method === 'GET' && url.pathname === '/console.css') {
      res.setHeader('content-type', 'text/css; charset=utf-8');
      res.end(CONSOLE_CSS);
      return;
    }
    if (req.method === 'GET' && url.pathname === '/favicon.ico') {
      res.statusCode = 204; // no icon, and no 404 in the browser's console
      res.end();
      return;
    }
    if (req.method === 'GET' && url.pathname === '/console.js') {
      res.setHeader('content-type', 'text/javascript; charset=utf-8');
      res.end(CONSOLE_JS);
      return;
    }
    const who = principal(req);
    const r: Req = { req, url, who, csrf: csrfFor(who) };
    let out: string | undefined;
    if (url.pathname === '/login') {
      out = req.method === 'POST' ? login(r, await readBody(req), res) : loginPage(r);
    } else if (req.method === 'GET' || req.method === 'HEAD') {
      const page = GET[url.pathname];
      if (!page) throw new HttpError(404, `no page ${url.pathname}`);
      // Off loopback every page needs credentials; on it, reads are open and actions still need them.
      if (!loopback && who === null) {
        if (o.basic) res.setHeader('www-authenticate', 'Basic realm="ferry console", charset="UTF-8"');
        res.statusCode = 401;
        out = loginPage(r, 'Log in to see this console.');
      } else out = await page(r);
    } else if (req.method === 'POST') {
      const action = POST[url.pathname];
      if (!action) throw new HttpError(404, `no action ${url.pathname}`);
      out = await action(r, await readBody(req));
    } else throw new HttpError(405, `${req.method} is not served`);
    if (out === undefined) {
      res.end();
      return;
    }
    res.setHeader('content-type', 'text/html; charset=utf-8');
    if (r.status !== undefined) res.statusCode = r.status;
    res.end(req.method === 'HEAD' ? undefined : out);
  }

  function fail(req: IncomingMessage, res: ServerResponse, err: unknown): void {
    const status =
      err instanceof HttpError
        ? err.status
        : isValidationError(err)
          ? 400
          : err instanceof SelectionChangedError
            ? 409
            : (err as { code?: string })?.code === '57014'
              ? 503
              : 500;
    const message =
      (err as { code?: string })?.code === '57014'
        ? 'the query took longer than the statement timeout (--statement-timeout-ms): narrow the filter'
        : ((err as Error)?.message ?? String(err));
    if (res.headersSent) {
      res.destroy();
      return;
    }
    res.statusCode = status;
    res.setHeader('content-type', 'text/html; charset=utf-8');
    res.end(
      `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${status} · Ferry console</title><link rel="stylesheet" href="/console.css"></head><body><main><h1>${status}</h1><p class="advice" id="error">${esc(message)}</p><p><a href="/">Overview</a></p></main></body></html>`,
    );
    void req;
  }

  return (req, res) => {
    handle(req, res).catch((err) => fail(req, res, err));
  };
}
