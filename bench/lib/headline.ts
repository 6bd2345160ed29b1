/**
 * The headline: every figure the issue sets a target for, each a ratio (or a
 * latency) beside the baseline it is measured against in the same run, read
 * from the scenarios' results. The runner prints it, latest.json keeps it,
 * docs/benchmarks.md and README render it; one list so they cannot disagree.
 */

// biome-ignore lint/suspicious/noExplicitAny: scenario results are read back from JSON
type Json = any;

export interface HeadlineFigure {
  /** Stable name (latest.json `ratios.<id>`). */
  id: string;
  figure: string;
  value: number | undefined;
  /** 'x': a ratio; 'ms': milliseconds; 'µs': microseconds. */
  unit: Unit;
  baseline: string;
  target: string;
  /** undefined when the figure was not measured in this run. */
  met: boolean | undefined;
}

type Unit = 'x' | 'ms' | 'µs';

const num = (x: unknown): number | undefined => (typeof x === 'number' && Number.isFinite(x) ? x : undefined);

/** A figure's target: a bound on its value (the text and the check both come from it), or only reported. */
type Target = { op: '≤' | '≥' | '>'; limit: number; note?: string } | 'reported';

const atMost = (limit: number, note?: string): Target => ({ op: '≤', limit, note });
const atLeast = (limit: number): Target => ({ op: '≥', limit });
const moreThan = (limit: number): Target => ({ op: '>', limit });

function figure(id: string, figureText: string, value: unknown, unit: Unit, baseline: string, t: Target): HeadlineFigure {
  const v = num(value);
  if (t === 'reported')
    return { id, figure: figureText, value: v, unit, baseline, target: '(reported)', met: v === undefined ? undefined : true };
  const target = `${t.op} ${t.limit}${unit === 'x' ? '×' : ` ${unit}`}${t.note ? ` ${t.note}` : ''}`;
  const ok = t.op === '≤' ? (n: number) => n <= t.limit : t.op === '≥' ? (n: number) => n >= t.limit : (n: number) => n > t.limit;
  return { id, figure: figureText, value: v, unit, baseline, target, met: v === undefined ? undefined : ok(v) };
}

export function headlineFigures(r: Record<string, Json>): HeadlineFigure[] {
  const pub = r.publisher?.ratios ?? {};
  const drain = r['relay-drain']?.headline;
  const lat = r['relay-latency']?.headline?.byRate ?? {};
  const inbox = r.inbox?.results;
  const alt = r.alternatives;
  const contract = r['contract-cost']?.ratios ?? {};
  const soak = r.soak;
  const soakText = soak ? `${soak.minutes} min at half the capacity` : 'the soak';
  const plain = 'business UPDATE + plain INSERT of the same JSON';
  const raw = 'raw pipelined JetStream publishing of the same messages, one connection';
  const byKeys = drain?.byKeys ?? {};
  const fn = r['publish-function-cost']?.statementRatios ?? {};
  const statement = "the owner's bare statement of the same writes, CPU per transaction";
  return [
    figure('publishCpuVsStatement1', 'publisher CPU, `publish` of 1 event, 8 writers', fn.publish, 'x', statement, atMost(1.15)),
    figure(
      'publishCpuVsStatement100',
      'publisher CPU, `publishMany` of 100 events, 8 writers',
      fn.publishMany100,
      'x',
      statement,
      atMost(1.15),
    ),
    figure(
      'relayPgUsPerEvent1000',
      "relay's PostgreSQL CPU per event, 1,000 keys",
      drain?.postgresCpuMsPer1k,
      'µs',
      'none: the CPU of the relay’s backends per drained event',
      atMost(10),
    ),
    figure('relayCpuVsRaw1000', 'relay process CPU, 1,000 keys, paired trials', drain?.relayCpuVsRaw, 'x', raw, atMost(1.15)),
    figure(
      'inboxCpuVsPlain',
      'inbox CPU per message (node + PostgreSQL + NATS), fresh events, paired',
      inbox?.fresh?.cpuRatio?.median,
      'x',
      'plain consumer, same handler SQL',
      atMost(1.3),
    ),
    figure('publishOverhead', 'publish, 8 writers', pub['publish@8'], 'x', plain, 'reported'),
    figure('publishOverhead32', 'publish, 32 writers', pub['publish@32'], 'x', plain, 'reported'),
    figure(
      'publishNotify',
      'publish, every transaction NOTIFYs (a relay waits), 8 writers',
      pub['publishNotify@8'],
      'x',
      plain,
      'reported',
    ),
    figure(
      'publishMany100',
      '`publishMany` of 100, 8 writers',
      pub['publishMany100@8'],
      'x',
      'business UPDATE + one 100-row plain INSERT',
      'reported',
    ),
    ...[10, 1000, 100_000].map((k) =>
      figure(
        `relayVsRawJetStream${k}`,
        `relay drain, ${k.toLocaleString('en')} keys, ${drain?.storage ?? 'file'} storage`,
        byKeys[k],
        'x',
        raw,
        'reported',
      ),
    ),
    figure('relayVsRawJetStreamMemory', 'relay drain, memory storage (worst key spread)', drain?.worstMemoryRatio, 'x', raw, 'reported'),
    figure('hotKeyVsRaw', 'relay drain, 1 hot key, file storage', drain?.hotKeyRatio, 'x', raw, 'reported'),
    figure(
      'twoRelaysVsOne',
      `two relay processes / one, ${(drain?.atKeys ?? 1000).toLocaleString('en')} keys`,
      drain?.twoInstancesVsOne,
      'x',
      'one relay process, same run',
      'reported',
    ),
    figure(
      'latencyP99At20',
      'commit → subscriber p99, 20 ev/s, defaults',
      lat['20/default']?.p99Ms,
      'ms',
      'COMMIT returning, open-loop load',
      atMost(10),
    ),
    figure(
      'latencyP99At1000',
      'commit → subscriber p99, 1,000 ev/s, defaults',
      lat['1000/default']?.p99Ms,
      'ms',
      'COMMIT returning, open-loop load',
      atMost(10),
    ),
    figure('inboxVsPlainConsumer', 'inbox, fresh events', inbox?.fresh?.ratio, 'x', 'plain consumer, same handler SQL', atLeast(0.8)),
    figure('inboxDuplicates50', 'inbox, 50% duplicates', inbox?.duplicates50?.ratio, 'x', 'plain consumer, same handler SQL', atLeast(0.9)),
    figure('inboxStale50', 'inbox, 50% stale', inbox?.stale50?.ratio, 'x', 'plain consumer, same handler SQL', atLeast(0.9)),
    figure(
      'relayVsPgBossOutbox10',
      'relay / pg-boss as the outbox, 10 keys',
      alt?.relayVsPgBossOutboxByKeys?.[10],
      'x',
      'pg-boss `key_strict_fifo` queue + worker',
      moreThan(1),
    ),
    figure(
      'relayVsPgBossOutbox',
      'relay / pg-boss as the outbox, 1,000 keys',
      alt?.relayVsPgBossOutboxByKeys?.[1000],
      'x',
      'pg-boss `key_strict_fifo` queue + worker',
      atLeast(2.5),
    ),
    figure(
      'relayVsTransactionalOutbox',
      'relay / pg-transactional-outbox, 1,000 keys',
      alt?.relayVsTransactionalOutboxByKeys?.[1000],
      'x',
      'its polling listener, segment = key',
      moreThan(1),
    ),
    figure('relayVsNaiveRelay', 'relay / a naive relay', alt?.relayVsNaiveRelay, 'x', 'one row at a time, await each ack', moreThan(1)),
    figure(
      'contractPublishValibot',
      'publish CPU with a valibot contract, 10-field event',
      contract.publishValibot,
      'x',
      'the same publish without contracts (node + PostgreSQL CPU)',
      atMost(1.05),
    ),
    figure(
      'contractPublishZod',
      'publish CPU with a zod contract, 10-field event',
      contract.publishZod,
      'x',
      'the same publish without contracts (node + PostgreSQL CPU)',
      'reported',
    ),
    figure(
      'soakP99Growth',
      `commit → applied p99, last ${soak?.window ?? 5} min of ${soakText}`,
      soak?.budgets?.p99Growth,
      'x',
      `the first ${soak?.window ?? 5} min`,
      atMost(1.5),
    ),
    figure(
      'soakSizeGrowth10Min',
      'Ferry tables + indexes at the end of the soak',
      soak?.budgets?.sizeGrowth,
      'x',
      `${soak?.sizeSpan ?? 10} min before the end`,
      atMost(1.05),
    ),
    figure(
      'soakDeadTupleShare',
      `dead tuples at the end of the soak, worst table (${soak?.budgets?.deadTupleWorstTable ?? '-'})`,
      soak?.budgets?.deadTupleShare,
      'x',
      'its live tuples',
      atMost(0.2),
    ),
    figure(
      'contractInboxValibot',
      'inbox CPU with a valibot contract',
      contract.inboxValibot,
      'x',
      'the same inbox without contracts',
      'reported',
    ),
  ];
}

/** A figure's value as text: `0.93×`, `4.2 ms`, or `n/a`. */
export function formatFigure(f: HeadlineFigure): string {
  if (f.value === undefined) return 'n/a';
  if (f.unit !== 'x') return `${f.value >= 10 ? f.value.toFixed(0) : f.value.toFixed(1)} ${f.unit}`;
  return f.value >= 10 ? `${f.value.toFixed(0)}×` : `${f.value.toFixed(2)}×`;
}

export function metText(f: HeadlineFigure): string {
  if (f.target.startsWith('(')) return '';
  return f.met === undefined ? 'not run' : f.met ? 'met' : 'MISSED';
}
