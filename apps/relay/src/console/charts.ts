import type pg from 'pg';
import { type Html, html } from './html.js';
import { type MinuteStat, publishedPerMinute } from './queries.js';

// The overview's two small charts: events published per minute and their insert → published
// latency over the last hour. A finished minute is read once and kept; each refresh reads only the
// minutes since (in steady state the current one), so a console left open costs the database one
// short index range per refresh, not an hour of rows.

export const CHART_MINUTES = 60;
const MINUTE = 60_000;
/** A minute is final this long after it ends: a mark whose transaction began in it may commit a little later. */
const SETTLE_MS = 10_000;

/** The last hour, minute by minute, read incrementally from the outbox. */
export class MinuteHistory {
  readonly #pool: pg.Pool;
  readonly #schema: string;
  readonly #final = new Map<number, MinuteStat>();
  /** Minutes before this one are final and kept. */
  #readFrom = 0;

  readonly #partialEveryMs: number;
  readonly #pace: number;
  /** The last read (and how long it took), reused for the current (partial) minute until it is due again. */
  #last: { at: number; tookMs: number; fresh: Map<number, MinuteStat> } | undefined;

  /**
   * `partialEveryMs`: how often the current minute is read again (the console: every third refresh),
   * or `pace` times as long as that read took, whichever is longer: a drain at thousands of events per
   * second puts a few hundred thousand rows in the current minute, and reading them every 15 s took
   * 3 % of a database core.
   */
  constructor(pool: pg.Pool, schema: string, partialEveryMs = 15_000, pace = 1) {
    this.#pool = pool;
    this.#schema = schema;
    this.#partialEveryMs = partialEveryMs;
    this.#pace = pace;
  }

  /** The newest minute read once it was over (and settled): a whole minute's count, or undefined before the first. */
  get newestFinal(): MinuteStat | undefined {
    let newest: MinuteStat | undefined;
    for (const [m, stat] of this.#final) if (newest === undefined || m > newest.minute) newest = stat;
    return newest;
  }

  /** The last CHART_MINUTES minutes, oldest first, the current (partial) one last; `now` is the database's clock. */
  async read(now: number): Promise<MinuteStat[]> {
    const current = Math.floor(now / MINUTE) * MINUTE;
    const first = current - (CHART_MINUTES - 1) * MINUTE;
    const from = Math.max(first, this.#readFrom);
    const finishing = from < current && from + MINUTE + SETTLE_MS <= now;
    let fresh: Map<number, MinuteStat>;
    const dueAfter = this.#last ? Math.max(this.#partialEveryMs, this.#pace * this.#last.tookMs) : 0;
    if (!finishing && this.#last && now - this.#last.at < dueAfter) fresh = this.#last.fresh;
    else {
      const started = performance.now();
      const rows = await publishedPerMinute(this.#pool, this.#schema, new Date(from), new Date(now + 1));
      fresh = new Map(rows.map((m) => [m.minute, m]));
      this.#last = { at: now, tookMs: performance.now() - started, fresh };
    }
    let readFrom = from;
    for (let m = from; m < current && m + MINUTE + SETTLE_MS <= now; m += MINUTE) {
      this.#final.set(m, fresh.get(m) ?? empty(m));
      readFrom = m + MINUTE;
    }
    this.#readFrom = readFrom;
    for (const m of this.#final.keys()) if (m < first) this.#final.delete(m);
    const out: MinuteStat[] = [];
    for (let m = first; m <= current; m += MINUTE) out.push(this.#final.get(m) ?? fresh.get(m) ?? empty(m));
    return out;
  }
}

const empty = (minute: number): MinuteStat => ({ minute, published: 0, p50Ms: null, p99Ms: null });

const hhmm = (ms: number) => new Date(ms).toISOString().slice(11, 16);
const ms = (v: number) => (v >= 10_000 ? `${(v / 1000).toFixed(0)} s` : v >= 1000 ? `${(v / 1000).toFixed(1)} s` : `${Math.round(v)} ms`);

const W = 600;
const H = 70;
const BAR = W / CHART_MINUTES;

/** Bars of `value` per minute, each with a tooltip; `extra` draws a second series over them. */
function bars(
  minutes: MinuteStat[],
  value: (m: MinuteStat) => number,
  cls: string,
  tip: (m: MinuteStat) => string,
  max: number,
  extra?: { value: (m: MinuteStat) => number; cls: string },
): Html {
  const y = (v: number) => (max > 0 ? Math.max(v > 0 ? 1 : 0, Math.round((v / max) * H)) : 0);
  return html`${minutes.map((m, i) => {
    const h = y(value(m));
    const h2 = extra ? Math.min(h, y(extra.value(m))) : 0;
    const x = (i * BAR).toFixed(1);
    return html`<g data-minute="${new Date(m.minute).toISOString()}" data-value="${value(m)}"><title>${tip(m)}</title><rect class="slot" x="${x}" y="0" width="${BAR.toFixed(1)}" height="${H}"></rect><rect class="${cls}" x="${x}" y="${H - h}" width="${(BAR - 1).toFixed(1)}" height="${h}"></rect>${
      extra && h2 > 0 ? html`<rect class="${extra.cls}" x="${x}" y="${H - h2}" width="${(BAR - 1).toFixed(1)}" height="${h2}"></rect>` : ''
    }</g>`;
  })}`;
}

/** The two charts as inline SVG (no script, no inline style: the CSP holds). */
export function minuteCharts(minutes: MinuteStat[]): Html {
  const last = minutes.at(-1);
  const first = minutes[0];
  if (!last || !first) return html``;
  const total = minutes.reduce((n, m) => n + m.published, 0);
  const maxPublished = Math.max(0, ...minutes.map((m) => m.published));
  const maxP99 = Math.max(0, ...minutes.map((m) => m.p99Ms ?? 0));
  const worst = minutes.reduce<MinuteStat | undefined>((w, m) => ((m.p99Ms ?? -1) > (w?.p99Ms ?? -1) ? m : w), undefined);
  const tipCount = (m: MinuteStat) => `${hhmm(m.minute)} UTC: ${m.published} published${m === last ? ' (so far)' : ''}`;
  const tipLatency = (m: MinuteStat) =>
    m.p50Ms === null ? `${hhmm(m.minute)} UTC: nothing published` : `${hhmm(m.minute)} UTC: p50 ${ms(m.p50Ms)}, p99 ${ms(m.p99Ms ?? 0)}`;
  const axis = html`<div class="axis"><span>${hhmm(first.minute)}</span><span>${hhmm(last.minute)} UTC</span></div>`;
  return html`<div class="charts">
<figure><figcaption>Published per minute, last hour: <b id="chart-total">${total}</b> in all, at most ${maxPublished}/min, ${last.published} so far this minute</figcaption>
<svg class="chart" data-chart="published" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="events published per minute">${bars(minutes, (m) => m.published, 'bar', tipCount, maxPublished)}</svg>${axis}</figure>
<figure><figcaption>Insert → published latency per minute (p99, p50 darker)${worst && worst.p99Ms !== null ? `: worst p99 ${ms(worst.p99Ms)} at ${hhmm(worst.minute)}` : ''}</figcaption>
<svg class="chart" data-chart="latency" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="insert to published latency per minute">${bars(minutes, (m) => m.p99Ms ?? 0, 'p99', tipLatency, maxP99, { value: (m) => m.p50Ms ?? 0, cls: 'p50' })}</svg>${axis}</figure>
</div>`;
}
