/**
 * docs/benchmarks.md, generated from one run's latest.json: the machine, the
 * headline ratios beside their targets, the charts, one section per scenario,
 * and the hand-written analysis in bench/lib/analysis.md.
 */
import { existsSync, readFileSync } from 'node:fs';
import { formatFigure, headlineFigures, metText } from './headline.js';
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

function publisherSection(pub: Json, lat: Json): string {
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
  const at = (rate: number, notify: string) => lat?.runs?.find((x: Json) => x.rate === rate && x.notify === notify);
  return `${table(['writers', 'scenario', 'tx/s (median)', 'spread', 'overhead vs plain INSERT'], rows)}

Each transaction is a business \`UPDATE\` of one of 10,000 accounts plus either \`publisher.publish\` with the defaults
(\`publish\`: no relay waiting, so no NOTIFY, what a busy relay's publishers pay; \`publishNotify\`: a relay's wait record
current throughout, so every transaction NOTIFYs) or a plain \`INSERT\` of the same JSON into a table with a bigserial key
(\`plain\`, the baseline); \`publishMany100\` against one 100-row \`INSERT … SELECT unnest\` (\`plainMany100\`).
Scenarios interleaved within each trial; ${pub.trials} trials of ${pub.seconds} s; medians.

**What the NOTIFY buys and costs.** A NOTIFY in every transaction costs ${Number.isFinite(notifyCost) ? `${(notifyCost * 100).toFixed(0)}%` : 'n/a'} of the publisher's
transactions per second with ${w} writers; the default sends one only while a relay waits (its polls found nothing), so
publishers of a busy relay pay none of it and an idle relay is woken at commit. Commit → subscriber p99 (section 3): ${n(at(20, 'default')?.p99Ms)} ms at 20 events/s with the default, ${n(at(20, 'true')?.p99Ms)} ms with
\`notify: true\`; ${n(at(1000, 'default')?.p99Ms)} vs ${n(at(1000, 'true')?.p99Ms)} ms at 1,000 events/s.`;
}

function publishCostSection(c: Json): string {
  if (!c) return '_not run_';
  const variants = Object.keys(c.cpuMicrosPerTx ?? {});
  return `What the publisher's CPU per transaction (this process + the writers' PostgreSQL backends) is beside the writes it
must make: \`statement\` is the key_versions upsert and the outbox insert (its pending row by trigger) as one named
statement sent by the owner, with no function, checks or NOTIFY check; \`rows\` the outbox insert alone, \`bare\` the same
into a copy without the trigger; \`plain\` a bigserial INSERT of the same JSON. ${c.writers} writers, each transaction a business
UPDATE and the events; ${c.trials} interleaved trials of ${c.seconds} s; medians.

${table(
  ['variant', 'tx/s', 'spread', 'CPU µs per tx', 'client / backend µs', 'CPU ÷ plain'],
  variants.map((k) => [
    k,
    c.results?.[k]?.median,
    spread(c.results?.[k]),
    c.cpuMicrosPerTx[k]?.micros,
    `${n(c.cpuMicrosPerTx[k]?.client)} / ${n(c.cpuMicrosPerTx[k]?.backend)}`,
    x2(c.cpuRatios?.[k]),
  ]),
)}

Publisher ÷ statement (budget ≤ 1.15×): \`publish\` ${x2(c.statementRatios?.publish)}, \`publishMany\` of 100 ${x2(c.statementRatios?.publishMany100)}.`;
}

function variantsTable(sw: Json, def: Json): string {
  if (!sw.variants?.length) return '';
  const rows = [
    [`${sw.params.keys.toLocaleString('en')} keys (the sweep's default point)`, def?.relayPerSec],
    ...sw.variants.map((v: Json) => [v.name, v.relayPerSec]),
  ];
  return `**What else moves it** (defaults, ${sw.params.sweepEvents.toLocaleString('en')}-event backlog, one trial each): the number of keys
(the relay keeps each key's rows in order; raw at the default window: ${n(def?.rawPerSec)} events/s):

${table(['variant', 'relay events/s'], rows)}

`;
}

function sweepSection(sw: Json): string {
  if (!sw) return '_not run_';
  const rec = sw.recommended;
  const def = sw.atDefault;
  const sameAsDefault = rec && rec.batchSize === sw.defaults.batchSize && rec.maxInFlight === sw.defaults.maxInFlight;
  return `A relay in the benchmark's process (so the options can vary) drains a ${sw.params.sweepEvents.toLocaleString('en')}-event backlog
(${sw.params.keys} keys, ${sw.params.storage ?? 'memory'} storage) for each batch size × max in flight, one trial per point, the raw ceiling at the same
window measured beside it:

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

function drainSection(d: Json): string {
  if (!d) return '_not run_';
  const ms = (s: Json) => (s && typeof s.median === 'number' ? fmt(s.median * 1000) : 'n/a');
  const rows = d.cells.map((c: Json) => [
    c.storage,
    c.keys.toLocaleString('en'),
    c.eventsPerSec.raw.median,
    c.eventsPerSec.one.median,
    `**${c.ratio.median.toFixed(2)}** ${spread(c.ratio)}`,
    ms(c.cpuPer1k.relay),
    ms(c.cpuPer1k.postgres),
    ms(c.cpuPer1k.raw),
    c.eventsPerSec.two.median,
    c.twoInstancesRatio.median.toFixed(2),
    `${ms(c.cpuPer1k.relayTwo)} / ${ms(c.cpuPer1k.postgresTwo)}`,
  ]);
  const hot = d.hotKey;
  return `${table(
    [
      'storage',
      'keys',
      'raw events/s',
      'relay events/s',
      'relay / raw (target ≥ 0.9)',
      'relay CPU ms / 1k',
      'PostgreSQL CPU ms / 1k',
      'raw client CPU ms / 1k',
      '2 relays events/s',
      '2 relays / raw',
      '2 relays CPU / PostgreSQL ms / 1k',
    ],
    rows,
  )}

${
  hot
    ? `**One hot key** (every event on one key, file storage, ${hot.events.toLocaleString('en')} events): ${n(hot.relay.median)} events/s against ${n(hot.raw.median)} raw, **${hot.ratio.median.toFixed(3)}×**
(${n(hot.cpuPer1k.median * 1000)} ms relay CPU per 1,000 events). The relay sends a key's next row only after the previous row's PubAck
(per-key order under every failure), so one key runs at one round trip per event.

`
    : ''
}\`${d.relayCommand}\` — a separate process with every tuning flag at its default — drains a backlog of
${d.params.events.toLocaleString('en')} events of about 200 bytes (${d.params.lanes} lanes, as \`ferry migrate\` creates; with more keys than events, every event has a key of its own), committed in one transaction
while it runs, timed from COMMIT to the last row marked published (every message is in the stream by then; the count
is checked), after a warm-up drain of the same size that is not counted (a relay runs for days). The ceiling: the same
messages (the same seven \`ce-*\` headers and \`Nats-Msg-Id\`, the same bytes) published raw with \`js.publish()\`,
pipelined, from one connection of the benchmark process that sets nats.js's \`noAsyncTraces\` (as the relay does), the
better of 100 and 5,000 PubAcks outstanding. "2
relays": two such processes sharing the lanes (does one Node connection cap the drain?). CPU: utime + stime from
\`/proc\` of the relay process(es) and of the PostgreSQL backends serving them, before and after; the raw client's is
the benchmark process's own (\`process.cpuUsage\`); nats-server's is not counted. ${d.params.trials} trials, order rotating
across raw, one relay and two relays; medians, and the ratio is the median of the per-trial ratios (± half its range).`;
}

function latencySection(l: Json): string {
  if (!l) return '_not run_';
  const p = l.params;
  return `${table(
    [
      'events/s',
      'publisher',
      'p50 ms',
      'p90 ms',
      'p99 ms (target ≤ 10)',
      'p99.9 ms',
      'max ms',
      'events measured',
      'lost',
      'machine busy',
      'relay CPU ms / 1k events',
      'its PG backends ms / 1k',
    ],
    l.runs.map((r: Json) => [
      r.rate,
      r.notify === 'true' ? '`notify: true`' : 'defaults',
      r.p50Ms,
      r.p90Ms,
      `**${n(r.p99Ms)}**`,
      r.p999Ms,
      r.maxMs,
      r.measured,
      r.lost,
      typeof r.machineBusy === 'number' ? `${Math.round(r.machineBusy * 100)}%` : '–',
      r.relayCpuMsPer1k ?? '–',
      r.postgresCpuMsPer1k ?? '–',
    ]),
  )}

What a user gets: \`${l.relayCommand}\` as a separate process, no tuning flag; \`createPublisher({ schema, source })\` (and,
in the other rows, with \`notify: true\`); transactions of ${p.perTx} events started on a fixed schedule whatever happened to the
earlier ones (open loop); latency from COMMIT returning in the producer to the message reaching a plain NATS core
subscription on the subject, in the same process (one clock). ${p.storage} storage, ${p.keys} keys; ${p.lowSeconds} s runs below
1,000 events/s, ${p.seconds} s at 1,000, the first ${p.warmupSeconds} s not counted. Machine busy: the share of all cores in use
during the run (every process: the producer and subscriber, the relay, PostgreSQL, nats-server); the p99 grows with it, as
CPU contention. Relay CPU and its PostgreSQL backends' CPU per 1,000 events committed (– : not measured in that run).`;
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

function contractSection(c: Json): string {
  if (!c) return '_not run_';
  const us = (x: Json) => `${x?.median?.toFixed(2)} ±${Math.round((x?.spread ?? 0) * 100)}%`;
  return `What a contract adds to the same ${c.fields}-field event, each part measured where it can be resolved (two publisher
instances measured alike end to end differ by more than the effect): the publisher's own work on a stand-in connection, the
publish function's work inside PostgreSQL without and with the two contract headers, and \`consumeData\` for the inbox; beside
the plain publish (one transaction each, this process plus the backend) and the plain inbox message (docs/contracts.md).

${table(
  ['part', 'CPU µs per event'],
  [
    ['publish, plain, one transaction (this process + PostgreSQL)', us(c.publishPlainUs)],
    ['publisher work, plain / valibot / zod', ['plain', 'valibot', 'zod'].map((k) => us(c.publisherNodeUs?.[k])).join(' / ')],
    ['publish function, no headers / contract headers', `${us(c.publishFunctionUs?.none)} / ${us(c.publishFunctionUs?.stamp)}`],
    ['inbox message, plain (this process)', us(c.inboxPlainUs)],
    ['consumeData, valibot / zod', `${us(c.consumeDataUs?.valibot)} / ${us(c.consumeDataUs?.zod)}`],
  ],
)}

${table(
  ['figure', '÷ plain'],
  Object.entries(c.ratios ?? {}).map(([k, v]) => [k, (v as number).toFixed(3)]),
)}`;
}

function soakSection(k: Json): string {
  if (!k) return '_not run_';
  return `Publisher, relay and one inbox in one process for ${k.minutes} minutes at ${n(k.ratePerSec)} events/s, half the
${n(k.capacityPerSec)} events/s they drained from commit to applied; retention ${k.retentionMinutes} min, pruned every minute;
PostgreSQL's default autovacuum. Latency is from the publisher's COMMIT to the inbox's.

${table(
  ['minute', 'applied', 'p50 ms', 'p99 ms', 'MiB', 'dead tuples', 'autovacuum runs'],
  k.perMinute.map((m: Json) => [m.minute, m.applied, m.p50Ms, m.p99Ms, m.totalBytes / 2 ** 20, m.deadTuples, m.autovacuums]),
)}

Dead ÷ live tuples at the end, tables holding 1,000 rows or more:
${k.deadTupleShares.map((x: Json) => `${x.name} ${x.share.toFixed(3)}`).join(', ') || 'none'}.`;
}

function inboxSection(inbox: Json): string {
  if (!inbox) return '_not run_';
  const cpu = (c: Json) => (c ? `${c.node} / ${c.postgres} / ${c.nats}` : '–');
  const rows = Object.entries<Json>(inbox.results).map(([mix, r]) => [
    mix,
    r.messages,
    r.plain.median,
    spread(r.plain),
    r.inbox.median,
    spread(r.inbox),
    `**${r.ratio.toFixed(2)}** ${r.pairedRatios ? `(${range(r.pairedRatios)})` : ''}`,
    `${r.inboxCounts.applied}/${r.inboxCounts.stale}/${r.inboxCounts.duplicate}`,
    cpu(r.cpuUsPerMessage?.plain),
    cpu(r.cpuUsPerMessage?.inbox),
    r.cpuRatio ? `**${r.cpuRatio.median.toFixed(2)}** (${range(r.cpuRatio)})` : '–',
  ]);
  return `${table(
    [
      'stream',
      'messages',
      'plain msgs/s',
      'spread',
      'inbox msgs/s',
      'spread',
      'inbox / plain, paired trials (target ≥ 0.8 fresh, ≥ 0.9 otherwise)',
      'inbox applied/stale/dup',
      'plain CPU µs/msg: Node / PostgreSQL / nats-server',
      'inbox CPU µs/msg',
      'CPU inbox / plain, paired trials (budget ≤ 1.25)',
    ],
    rows,
  )}

The inbox (\`latest\` mode: version gate, handler, version record, one transaction per message, concurrency
${inbox.params.concurrency}) against a plain JetStream pull consumer running the same handler SQL (a projection upsert) in its own
transaction, same stream, same concurrency, ${inbox.params.trials} trials in alternating order. ${inbox.note ?? ''}`;
}

function alternativesSection(alt: Json): string {
  if (!alt) return '_not run_';
  if (!alt.byKeys) return '_not run with this version of the scenario_';
  const names: Record<string, string> = {
    ferry: 'Ferry: publisher + relay',
    pgboss: 'pg-boss as the outbox (`key_strict_fifo`, worker publishing)',
    pto: 'pg-transactional-outbox (polling listener, segment = key)',
  };
  const rows: Array<Array<string | number>> = [];
  for (const [keys, byApproach] of Object.entries<Json>(alt.byKeys)) {
    for (const [a, r] of Object.entries<Json>(byApproach)) {
      rows.push([
        Number(keys).toLocaleString('en'),
        names[a] ?? a,
        r.drainPerSec.median,
        spread(r.drainPerSec),
        a === 'ferry' ? '(baseline)' : `**${n(r.ferryVsThis)}×**`,
        r.producerTxPerSec.median,
        `${r.lost} / ${r.duplicated}`,
      ]);
    }
  }
  rows.push([
    '1,000',
    `naive relay (claim 1 row, publish, await ack, update; first ${alt.params.naiveEvents} rows)`,
    alt.naive.median,
    spread(alt.naive),
    `**${n(alt.relayVsNaiveRelay)}×**`,
    "(Ferry's outbox)",
    '',
  ]);
  return `${table(['keys', 'approach', 'drain events/s', 'spread', 'Ferry / this', 'producer tx/s', 'lost / duplicated'], rows)}

The same events (${alt.params.events.toLocaleString('en')} per drain, ${(alt.params.fewKeyEvents ?? alt.params.events).toLocaleString('en')} below 100 keys, where pg-boss hands a key's next job out only on
its next poll), written by ${alt.params.writers} writers, one event per business transaction (business \`UPDATE\` + the approach's own
write on the caller's client), all published to a file-storage stream with the same encoding (\`ce-*\` headers,
\`Nats-Msg-Id\` = the event id). pg-boss: a \`key_strict_fifo\` queue, \`singletonKey\` = the key, a worker fetching batches of
100 (\`localConcurrency\` 2, \`burstWhenBatchFull\`) that publishes and completes after the PubAcks.
pg-transactional-outbox: its \`initializeMessageStorage\` with segment = the key and concurrency \`sequential\` (its per-key
order: its polling function hands out only the oldest unprocessed message of a segment), drained by its
\`initializePollingMessageListener\` (batches of 100, 100 ms polling interval; its defaults are 5 and 500 ms), whose handler
publishes and returns after the PubAck. **Lost / duplicated**: after each drain the whole stream is read back and every
event id counted (summed over the trials). Drain rates are steady rates, from a tenth of the events handed over to the
last. ${alt.params.trials} trials, order rotating.`;
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

/** The machine in one sentence (docs and README). */
function machineText(m: Json): string {
  return `${m.cpus} × ${m.cpuModel}, ${m.memoryGiB} GiB RAM, load average at start ${m.loadAverageAtStart.join(' / ')};
PostgreSQL ${m.postgres} (shared_buffers ${m.postgresSettings.shared_buffers}, synchronous_commit ${m.postgresSettings.synchronous_commit}),
nats-server ${m.natsServer} (JetStream, file storage unless a table says memory), Node ${m.node}; PostgreSQL, NATS and the benchmark
share the machine`;
}

function headlineTable(latest: Json): string {
  return table(
    ['figure', 'value', 'baseline (same run)', 'target', ''],
    headlineFigures(latest.scenarios).map((f) => [
      f.figure,
      formatFigure(f),
      f.baseline,
      f.target,
      metText(f) === 'MISSED' ? '**missed**' : metText(f),
    ]),
  );
}

export const README_START =
  '<!-- bench:start: generated by `node bench/dist/run.js --render` from bench/results/latest.json; do not edit by hand -->';
export const README_END = '<!-- bench:end -->';

/** README's benchmark block: the machine, what is claimed, the headline table. */
export function renderReadmeBlock(latest: Json): string {
  return `${README_START}

Last full run, ${latest.run.at.slice(0, 10)}, on ${machineText(latest.machine)}. **The claim is the ratios, not the absolute
rates**: every figure is measured against a baseline in the same run on the same machine (medians of interleaved
trials), and the machine is small and shared, so the rates move from run to run while the ratios hold. Details and
how to reproduce: [docs/benchmarks.md](docs/benchmarks.md).

${headlineTable(latest)}

${README_END}`;
}

/** README.md with its benchmark block replaced (between the markers), or unchanged when it has none. */
export function replaceReadmeBlock(readme: string, latest: Json): string {
  const a = readme.indexOf(README_START.slice(0, 16));
  const b = readme.indexOf(README_END);
  if (a < 0 || b < a) return readme;
  return `${readme.slice(0, a)}${renderReadmeBlock(latest)}${readme.slice(b + README_END.length)}`;
}

export function renderMarkdown(latest: Json, charts: string[]): string {
  const s = latest.scenarios;
  const analysisFile = new URL('../../lib/analysis.md', import.meta.url);
  const analysis = existsSync(analysisFile) ? readFileSync(analysisFile, 'utf8').trim() : '';
  const chart = (file: string, alt: string) => (charts.includes(file) ? `![${alt}](${file})\n` : '');
  const r = latest.relay ?? {};
  return `# Benchmarks

<!-- Generated by \`${latest.run.command}\` (bench/run.ts) from bench/results/latest.json; \`node bench/dist/run.js --render\`
     writes it again. Do not edit by hand: the analysis at the end comes from bench/lib/analysis.md. -->

Every figure stands beside a baseline measured in the same run on the same machine, as a ratio, with the median
of several interleaved trials and their spread (±half the min–max range, relative to the median). The machine is
shared and small, so **the ratios are the claim, not the absolute rates**.

Run **${latest.run.at}**${latest.run.quick ? ' (QUICK smoke run: sizes too small to quote)' : ''}, ${Math.round(latest.run.totalSeconds / 60)} minutes:
${machineText(latest.machine)}.

Reproduce: \`npm run bench\` (full, about an hour with the 30-minute soak; run it on a quiet machine) or \`npm run bench -- --quick\` (smoke, about 2
minutes, writes to bench/results/quick/); some scenarios: \`npm run bench -- --only relay-drain,relay-latency\` (writes to
bench/results/partial/); one scenario: \`npm run build && node bench/dist/scenarios/relay-drain.js --help\`.

## Headline

${headlineTable(latest)}

Relay drain ${n(r.eventsPerSec)} events/s against ${n(r.rawEventsPerSec)} raw (${n(r.atKeys)} keys, file storage); relay CPU ${n(r.cpuMsPer1k?.relay)} ms and
PostgreSQL CPU ${n(r.cpuMsPer1k?.postgres)} ms per 1,000 events (the raw client: ${n(r.cpuMsPer1k?.raw)} ms); publisher ${n(latest.publisher?.txPerSec)} transactions/s
(8 writers); inbox ${n(latest.inbox?.eventsPerSec)} events/s.

${chart('bench-relay-sweep.svg', 'Relay drain throughput across batch size and max in flight, with the raw JetStream ceiling')}
${chart('bench-relay-latency.svg', 'Commit-to-ack latency percentiles against offered load, LISTEN and polling only')}
${chart('bench-growth.svg', 'Relay drain throughput and publish latency against retained published rows')}
## 1. Publisher overhead

${publisherSection(s.publisher, s['relay-latency'])}

### Publisher CPU against the bare statement

${publishCostSection(s['publish-function-cost'])}

## 2. Relay drain vs raw JetStream

${drainSection(s['relay-drain'])}

## 3. Commit → subscriber latency with the defaults

${latencySection(s['relay-latency'])}

## 4. Inbox vs a plain consumer

${inboxSection(s.inbox)}

## 5. The alternatives

${alternativesSection(s.alternatives)}

## 6. Growth

${growthSection(s.growth)}

## 7. Tuning: the batch × in-flight sweep

${sweepSection(s['relay-sweep'])}

## 8. Latency against offered load (relay in process)

${loadSection(s['relay-load'])}

## 9. Event contracts

${contractSection(s['contract-cost'])}

## 10. Soak

${chart('bench-soak-latency.svg', 'Soak: commit-to-applied p50 and p99, minute by minute')}
${chart('bench-soak-size.svg', 'Soak: Ferry table and index size and dead tuples, minute by minute')}
${soakSection(s.soak)}
${analysis ? `\n## Analysis\n\n${analysis}\n` : ''}`;
}
