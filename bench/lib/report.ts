/**
 * docs/benchmarks.md, generated from one run's latest.json: the machine, the
 * headline ratios beside their targets, the charts, one section per scenario,
 * and the hand-written analysis in bench/lib/analysis.md.
 */
import { existsSync, readFileSync } from 'node:fs';
import { fmt } from './stats.js';

// biome-ignore lint/suspicious/noExplicitAny: results are read back from JSON
type Json = any;

const n = (x: unknown) => (typeof x === 'number' && Number.isFinite(x) ? fmt(x) : 'n/a');
const x2 = (x: unknown) => (typeof x === 'number' && Number.isFinite(x) ? `${x.toFixed(2)}×` : 'n/a');
const spread = (s: Json) => (s && typeof s.spread === 'number' ? `±${(s.spread * 100).toFixed(0)}%` : '');
const range = (s: Json) => (s && typeof s.min === 'number' ? `${fmt(s.min)}–${fmt(s.max)}` : '');

function table(header: string[], rows: Array<Array<string | number>>): string {
  const line = (cells: Array<string | number>) => `| ${cells.map((c) => (typeof c === 'number' ? n(c) : c)).join(' | ')} |`;
  return [line(header), `|${header.map(() => '---').join('|')}|`, ...rows.map(line)].join('\n');
}

function publisherSection(pub: Json, load: Json): string {
  if (!pub) return '_not run_';
  const rows: Array<Array<string | number>> = [];
  for (const [writers, r] of Object.entries<Json>(pub.results)) {
    for (const [name, sum] of Object.entries<Json>(r)) {
      const base = name.endsWith('100') ? r.plainMany100 : r.plain;
      rows.push([writers, name, sum.median, spread(sum), name.startsWith('plain') ? '(baseline)' : x2(base.median / sum.median)]);
    }
  }
  const w = Object.keys(pub.results)[0] ?? '8';
  const r = pub.results[w];
  const quiet = r?.publish?.median;
  const loud = r?.publishNotify?.median;
  const notifyCost = quiet && loud ? 1 - loud / quiet : Number.NaN;
  const l50 = load?.runs?.find((x: Json) => x.listen && x.loadPercent === 50);
  const p50 = load?.runs?.find((x: Json) => !x.listen && x.loadPercent === 50);
  const l10 = load?.runs?.find((x: Json) => x.listen && x.loadPercent === 10);
  const p10 = load?.runs?.find((x: Json) => !x.listen && x.loadPercent === 10);
  const on = notifyCost <= 0.1;
  return `${table(['writers', 'scenario', 'tx/s (median)', 'spread', 'overhead vs plain INSERT'], rows)}

Each transaction is a business \`UPDATE\` of one of 10,000 accounts plus either \`publisher.publish\` (\`publish\`,
\`publishNotify\` with \`notify: true\`) or a plain \`INSERT\` of the same JSON into a table with a bigserial key
(\`plain\`, the baseline); \`publishMany100\` against one 100-row \`INSERT … SELECT unnest\` (\`plainMany100\`).
Scenarios interleaved within each trial; ${pub.trials} trials of ${pub.seconds} s.

**The \`notify\` default.** With ${w} writers, \`notify: true\` costs ${Number.isFinite(notifyCost) ? `${(notifyCost * 100).toFixed(0)}%` : 'n/a'} of the
publisher's transactions per second (NOTIFY queues on a database-wide lock at commit). What it buys (scenario 3):
commit-to-ack p50 ${n(l10?.p50Ms)} ms with LISTEN vs ${n(p10?.p50Ms)} ms polling only at 10% load, ${n(l50?.p50Ms)} vs ${n(p50?.p50Ms)} ms at 50%.
${
  on
    ? 'The cost is small, so the data supports `notify: true` as the default.'
    : 'The throughput cost is larger than the latency gain is worth for most producers, so the data supports keeping `notify: false` as the default (the relay polls adaptively: 5 ms after finding rows, doubling to `--poll-interval-ms` when idle); turn it on where a few milliseconds of latency at low load matter more than peak write throughput.'
}`;
}

function variantsTable(sw: Json, def: Json): string {
  if (!sw.variants?.length) return '';
  const rows = [
    [`${sw.params.keys.toLocaleString('en')} keys (the sweep's default point)`, def?.relayPerSec, def?.rawPerSec],
    ...sw.variants.map((v: Json) => [v.name, v.relayPerSec, v.rawPerSec ?? '']),
  ];
  return `**What else moves it** (defaults, ${sw.params.sweepEvents.toLocaleString('en')}-event backlog, one trial each): the number of keys
(the relay keeps each key's rows in order), and nats.js async traces (two \`Error\`s with stack traces built per request
unless the connection sets \`noAsyncTraces\`):

${table(['variant', 'relay events/s', 'raw events/s (same option)'], rows)}

`;
}

function sweepSection(sw: Json): string {
  if (!sw) return '_not run_';
  const h = sw.headline;
  const rec = sw.recommended;
  const def = sw.atDefault;
  const sameAsDefault = rec && rec.batchSize === sw.defaults.batchSize && rec.maxInFlight === sw.defaults.maxInFlight;
  return `${table(
    ['path', 'events/s (median)', 'spread', 'min–max'],
    [
      ['raw pipelined JetStream publish, one connection (ceiling)', h.raw.median, spread(h.raw), range(h.raw)],
      ['Ferry relay: claim, publish, PubAcks, mark published', h.relay.median, spread(h.relay), range(h.relay)],
      ['**ratio relay / raw** (target ≥ 0.8)', `**${h.ratio.median.toFixed(2)}**`, spread(h.ratio), range(h.ratio)],
    ],
  )}

A backlog of ${sw.params.events.toLocaleString('en')} events (${sw.params.keys} keys, ${sw.params.lanes} lanes, ~90-byte JSON payloads) committed in one
transaction while the relay runs (relay defaults: batch ${sw.defaults.batchSize}, max in flight ${sw.defaults.maxInFlight}), timed from COMMIT to the
last batch marked published; against the same messages (same CloudEvents headers and \`Nats-Msg-Id\`, same sizes)
published raw from one Node connection with the same window of unacknowledged messages. ${sw.params.trials} trials, raw
and relay order alternating. Each run gets a fresh memory stream.

**Sweep** (${sw.params.sweepEvents.toLocaleString('en')}-event backlog, one trial per point, the raw ceiling at the same window measured beside it):

${table(
  ['batch size', 'max in flight', 'relay events/s', 'raw events/s', 'ratio'],
  sw.sweep.map((s: Json) => [s.batchSize, s.maxInFlight, s.relayPerSec, s.rawPerSec, s.ratio.toFixed(2)]),
)}

${variantsTable(sw, def)}**Defaults from the data.** Fastest within 5% of the best, then the smallest window: \`--batch-size ${rec?.batchSize}
--max-in-flight ${rec?.maxInFlight}\` (${n(rec?.relayPerSec)} events/s; the current defaults ${sw.defaults.batchSize}/${sw.defaults.maxInFlight}
gave ${n(def?.relayPerSec)} events/s in the sweep). ${
    sameAsDefault
      ? 'The current defaults are the recommendation.'
      : 'Single-trial sweep points on a shared 2-core machine differ by more than 5% from run to run; change the defaults only when several runs agree.'
  }`;
}

function loadSection(load: Json): string {
  if (!load) return '_not run_';
  return `Capacity: **${n(load.capacityPerSec)} events/s** reach the stream with ${load.params.producers} closed-loop producers (transactions
of ${load.params.perTx} events) and one relay. Then open-loop runs of ${load.params.seconds} s (first ${load.params.warmupSeconds} s not counted) at
${load.params.loads.join('%, ')}% of it; latency is from the producer's COMMIT returning to the message arriving at a consumer in
the same process (the PubAck plus one local delivery).

${table(
  ['load', 'wake-up', 'offered events/s', 'p50 ms', 'p99 ms', 'p99.9 ms', 'max ms', 'events', 'sustainable'],
  load.runs.map((r: Json) => [
    `${r.loadPercent}%`,
    r.listen ? 'LISTEN + polling' : 'polling only',
    r.offeredPerSec,
    r.sustainable ? r.p50Ms : '—',
    r.sustainable ? r.p99Ms : '—',
    r.sustainable ? r.p999Ms : '—',
    r.sustainable ? r.maxMs : '—',
    r.measured,
    r.sustainable ? 'yes' : `**no**: ${r.why}`,
  ]),
)}

A run is unsustainable when its producers committed under 95% of the offered events, or its backlog in the last
fifth of the run was over twice that of the second fifth and over half a second of events; its percentiles are not
reported (they would describe a queue, not the relay).`;
}

function inboxSection(inbox: Json): string {
  if (!inbox) return '_not run_';
  const rows = Object.entries<Json>(inbox.results).map(([mix, r]) => [
    mix,
    r.messages,
    r.plain.median,
    spread(r.plain),
    r.inbox.median,
    spread(r.inbox),
    `**${r.ratio.toFixed(2)}** ${r.pairedRatios ? `(${range(r.pairedRatios)})` : ''}`,
    `${r.inboxCounts.applied}/${r.inboxCounts.stale}/${r.inboxCounts.duplicate}`,
  ]);
  return `${table(['stream', 'messages', 'plain msgs/s', 'spread', 'inbox msgs/s', 'spread', 'inbox / plain, paired trials (target ≥ 0.7)', 'inbox applied/stale/dup'], rows)}

The inbox (\`latest\` mode: version gate, handler, version record, one transaction per message, concurrency
${inbox.params.concurrency}) against a plain JetStream pull consumer running the same handler SQL (a projection upsert) in its own
transaction, same stream, same concurrency, ${inbox.params.trials} trials in alternating order. ${inbox.note ?? ''}`;
}

function alternativesSection(alt: Json): string {
  if (!alt) return '_not run_';
  const d = alt.drainPerSec;
  const p = alt.producerTxPerSec;
  return `${table(
    ['approach', 'drain events/s', 'spread', 'Ferry relay / this', 'producer tx/s', 'spread'],
    [
      ['Ferry: publisher + relay', d.ferry.median, spread(d.ferry), '(baseline)', p.ferry.median, spread(p.ferry)],
      [
        'pg-boss as the outbox (`key_strict_fifo` queue, worker publishing)',
        d.pgboss.median,
        spread(d.pgboss),
        `**${alt.relayVsPgBossOutbox.toFixed(1)}×**`,
        p.pgboss.median,
        spread(p.pgboss),
      ],
      [
        `naive relay (claim 1 row, publish, await ack, update; first ${alt.params.naiveEvents} rows)`,
        d.naive.median,
        spread(d.naive),
        `**${alt.relayVsNaiveRelay.toFixed(1)}×**`,
        '(same outbox as Ferry)',
        '',
      ],
    ],
  )}

The same ${alt.params.events.toLocaleString('en')} events (${alt.params.keys} keys), written by ${alt.params.writers} writers, one event per business transaction
(business \`UPDATE\` + \`publisher.publish\`, or + \`boss.send\` on the caller's client through pg-boss's \`db\` option, \`singletonKey\`
= the event key). pg-boss's worker fetches batches of 100 (\`localConcurrency\` 2, \`burstWhenBatchFull\`), publishes them
pipelined and completes them after the PubAcks. Drain rates are steady rates, from a tenth of the events
acknowledged to the last, so that no one's cold start (connections, JIT, the first JetStream request) counts. ${alt.params.trials} trials, order alternating.`;
}

function growthSection(g: Json): string {
  if (!g) return '_not run_';
  const base = g.levels[0];
  const rows = g.levels.map((l: Json) => [
    l.retained.toLocaleString('en'),
    l.drainPerSec.median,
    x2(l.drainPerSec.median / base.drainPerSec.median),
    l.publishP50Ms.median,
    x2(l.publishP50Ms.median / base.publishP50Ms.median),
    l.publishP99Ms.median,
    l.size.tableMiB,
    l.size.indexesMiB,
  ]);
  const pr = g.prune;
  return `${table(['retained published rows', 'drain events/s', 'vs 0', 'publish p50 ms', 'vs 0', 'publish p99 ms', 'table MiB', 'indexes MiB'], rows)}

Retained rows generated with \`INSERT … SELECT generate_series\` (marked published 8 days ago), then \`VACUUM ANALYZE\`.
Per level: the relay drains a ${g.params.backlog.toLocaleString('en')}-event backlog, and one writer runs ${g.params.publishes} sequential business
transactions (UPDATE + publish); median of ${g.params.trials}. **Pruning** (the relay's own prune, 7-day retention, batches of 5,000):
${pr.rows.toLocaleString('en')} rows in ${n(pr.seconds)} s; table ${n(pr.before.tableMiB)} → ${n(pr.after.tableMiB)} MiB, indexes
${n(pr.before.indexesMiB)} → ${n(pr.after.indexesMiB)} MiB after a plain \`VACUUM\` (the space is reused by new rows, not returned to the
OS; \`VACUUM FULL\` or \`pg_repack\` would return it); drain after pruning ${n(pr.drainAfterPerSec)} events/s.`;
}

function costSection(c: Json): string {
  if (!c) return '_not run_';
  const k = c.cpuSecondsPer1k;
  return `${table(
    ['process', 'CPU seconds / 1,000 events', 'spread', 'vs raw publisher'],
    [
      ['raw pipelined publisher (baseline, this process)', k.rawPublisher.median, spread(k.rawPublisher), '1.00×'],
      ['`ferry relay` child process', k.relay.median, spread(k.relay), x2(k.relay.median / k.rawPublisher.median)],
      ['PostgreSQL backends serving the relay', k.postgres.median, spread(k.postgres), x2(k.postgres.median / k.rawPublisher.median)],
    ],
  )}

A \`ferry relay\` child (defaults, \`--no-maintenance\`) drains ${c.params.events.toLocaleString('en')} events (${n(c.drainPerSec.median)} events/s); utime +
stime from \`/proc/<pid>/stat\` before and after, for the relay and for the PostgreSQL backends whose client ports
belong to it (claims, marks, lane leases, LISTEN). The nats-server's own CPU is not included. Median of ${c.params.trials}.`;
}

export function renderMarkdown(latest: Json, charts: string[]): string {
  const m = latest.machine;
  const s = latest.scenarios;
  const r = latest.ratios;
  const t = latest.targets;
  const met = (k: string) => (t[k]?.met ? 'met' : '**missed**');
  const analysisFile = new URL('../../lib/analysis.md', import.meta.url);
  const analysis = existsSync(analysisFile) ? readFileSync(analysisFile, 'utf8').trim() : '';
  const chart = (file: string, alt: string) => (charts.includes(file) ? `![${alt}](${file})\n` : '');
  return `# Benchmarks

<!-- Generated by \`${latest.run.command}\` (bench/run.ts) from bench/results/latest.json. Do not edit by hand:
     the analysis at the end comes from bench/lib/analysis.md. -->

Every figure stands beside a baseline measured in the same run on the same machine, as a ratio, with the median
of several interleaved trials and their spread (±half the min–max range, relative to the median). The machine is
shared and noisy, so read the ratios, not the absolute rates.

Run **${latest.run.at}**${latest.run.quick ? ' (QUICK smoke run: sizes too small to quote)' : ''}, ${Math.round(latest.run.totalSeconds / 60)} minutes:
${m.cpus} × ${m.cpuModel}, ${m.memoryGiB} GiB RAM, load average at start ${m.loadAverageAtStart.join(' / ')};
PostgreSQL ${m.postgres} (shared_buffers ${m.postgresSettings.shared_buffers}, synchronous_commit ${m.postgresSettings.synchronous_commit}),
nats-server ${m.natsServer} (JetStream, memory streams), Node ${m.node}; PostgreSQL, NATS and the benchmark share the machine.

Reproduce: \`npm run bench\` (full, ~15 minutes) or \`npm run bench -- --quick\` (smoke, under a minute, writes to
bench/results/quick/); one scenario: \`npm run build && node bench/dist/scenarios/relay-sweep.js\` (see each file's header).

## Headline

${table(
  ['figure', 'value', 'baseline (same run)', 'target', ''],
  [
    ['publisher overhead', x2(r.publishOverhead), 'business UPDATE + plain INSERT of the same JSON', '≤ 1.3×', met('publishOverhead')],
    [
      'relay drain throughput',
      x2(r.relayVsRawJetStream),
      'raw pipelined JetStream publishing, one connection',
      '≥ 0.8×',
      met('relayVsRawJetStream'),
    ],
    [
      'inbox throughput (fresh events)',
      x2(r.inboxVsPlainConsumer),
      'plain consumer, same handler SQL',
      '≥ 0.7×',
      met('inboxVsPlainConsumer'),
    ],
    [
      'relay vs pg-boss as the outbox',
      `${n(r.relayVsPgBossOutbox)}×`,
      'pg-boss `key_strict_fifo` queue + worker',
      '> 1×',
      met('relayVsPgBossOutbox'),
    ],
    ['relay vs a naive relay', `${n(r.relayVsNaiveRelay)}×`, 'one row at a time, await each ack', '> 1×', met('relayVsNaiveRelay')],
  ],
)}

Relay drain ${n(latest.relay.eventsPerSec)} events/s; commit-to-ack p50 / p99 / p99.9 ${n(latest.relay.commitToAckMs.p50)} /
${n(latest.relay.commitToAckMs.p99)} / ${n(latest.relay.commitToAckMs.p999)} ms (${latest.relay.commitToAckAt ?? 'n/a'}); publisher
${n(latest.publisher.txPerSec)} transactions/s (${latest.publisher.writers} writers); inbox ${n(latest.inbox.eventsPerSec)} events/s.

${chart('bench-relay-sweep.svg', 'Relay drain throughput across batch size and max in flight, with the raw JetStream ceiling')}
${chart('bench-relay-latency.svg', 'Commit-to-ack latency percentiles against offered load, LISTEN and polling only')}
${chart('bench-growth.svg', 'Relay drain throughput and publish latency against retained published rows')}
## 1. Publisher overhead

${publisherSection(s.publisher, s['relay-load'])}

## 2. Relay drain vs raw JetStream, and the batch × in-flight sweep

${sweepSection(s['relay-sweep'])}

## 3. Commit-to-ack latency under steady open-loop load

${loadSection(s['relay-load'])}

## 4. Inbox vs a plain consumer

${inboxSection(s.inbox)}

## 5. The alternatives

${alternativesSection(s.alternatives)}

## 6. Growth

${growthSection(s.growth)}

## 7. Cost

${costSection(s.cost)}
${analysis ? `\n## Analysis\n\n${analysis}\n` : ''}`;
}
