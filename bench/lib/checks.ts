/** What the smoke run checks: every scenario produced its numbers (never thresholds). */

// biome-ignore lint/suspicious/noExplicitAny: scenario results are read back from JSON
type Json = any;

/** Every number a scenario must produce, by path; the smoke run fails on any that is missing or not finite. */
export function missingNumbers(name: string, r: Json): string[] {
  const paths: Record<string, string[]> = {
    publisher: ['txPerSec', 'publishOverhead'],
    'relay-sweep': [
      'headline.raw.median',
      'headline.relay.median',
      'headline.ratio.median',
      'sweep.0.relayPerSec',
      'recommended.batchSize',
    ],
    'relay-load': ['capacityPerSec', 'runs.0.p50Ms', 'runs.0.p99Ms', 'runs.0.p999Ms', 'runs.1.p50Ms'],
    inbox: ['results.fresh.ratio', 'results.duplicates50.ratio', 'results.stale50.ratio'],
    alternatives: ['relayVsPgBossOutbox', 'relayVsNaiveRelay', 'drainPerSec.pgboss.median', 'drainPerSec.naive.median'],
    growth: ['levels.0.drainPerSec.median', 'levels.2.drainPerSec.median', 'levels.2.publishP50Ms.median', 'prune.after.tableMiB'],
    'key-spread': ['byKeys.1.ratio', 'byKeys.10.ratio', 'byKeys.1000.ratio'],
    'blocked-key': ['claimRatio', 'drainRatio', 'claimMs.blocked.median'],
    cost: ['cpuSecondsPer1k.relay.median', 'cpuSecondsPer1k.postgres.median', 'cpuSecondsPer1k.rawPublisher.median'],
  };
  if (!r) return ['(no result file)'];
  return (paths[name] ?? []).filter((p) => {
    const v = p.split('.').reduce<Json>((o, k) => (o == null ? undefined : o[k]), r);
    return typeof v !== 'number' || !Number.isFinite(v);
  });
}
