import { withTransaction } from '@ferry/core';
import { createPublisher } from '@ferry/publisher';
import type pg from 'pg';

/** What the publish transactions felt while something else ran. */
export interface PublishLoadReport {
  publishesDuring: number;
  publishesPerSecondDuring: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  p99BeforeMs: number;
}

const round = (x: number) => Math.round(x * 10) / 10;

/**
 * Publishes one event per transaction from `writers` loops until stopped (the
 * publisher's defaults, keys `load-0` … `load-999`); `stop(from, to)` reports
 * the latencies of the transactions that overlapped [from, to] (performance.now()
 * times), and the p99 of those that ended before it.
 */
export function publishLoad(
  pool: pg.Pool,
  schema: string,
  writers: number,
): { stop(from: number, to: number): Promise<PublishLoadReport> } {
  const publisher = createPublisher({ schema, source: 'bench-migrate' });
  const done: Array<{ start: number; end: number }> = [];
  let running = true;
  let n = 0;
  const loops = Array.from({ length: writers }, async () => {
    while (running) {
      const start = performance.now();
      await withTransaction(pool, (tx) =>
        publisher.publish(tx, { subject: 'bench.orders', key: `load-${n % 1000}`, type: 'OrderPlaced', data: { n: n++ } }),
      );
      done.push({ start, end: performance.now() });
    }
  });
  return {
    async stop(from: number, to: number) {
      running = false;
      await Promise.all(loops);
      const during = done.filter((t) => t.end >= from && t.start <= to).map((t) => t.end - t.start);
      during.sort((a, b) => a - b);
      const at = (q: number) => during[Math.min(during.length - 1, Math.floor(q * during.length))] ?? 0;
      const before = done.filter((t) => t.end < from).map((t) => t.end - t.start);
      return {
        publishesDuring: during.length,
        publishesPerSecondDuring: Math.round(during.length / ((to - from) / 1000)),
        p50Ms: round(at(0.5)),
        p99Ms: round(at(0.99)),
        maxMs: round(during.at(-1) ?? 0),
        p99BeforeMs: round(before.sort((a, b) => a - b)[Math.floor(0.99 * before.length)] ?? 0),
      };
    },
  };
}
