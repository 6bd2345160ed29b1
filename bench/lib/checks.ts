/** What the smoke run checks: every scenario produced its numbers (never thresholds). */

// biome-ignore lint/suspicious/noExplicitAny: scenario results are read back from JSON
type Json = any;

/** Every number a scenario must produce, by path; the smoke run fails on any that is missing or not finite. */
export function missingNumbers(name: string, r: Json): string[] {
  const paths: Record<string, string[]> = {
    publisher: ['txPerSec', 'publishOverhead', 'ratios.publishNotify@8', 'ratios.publishMany100@8'],
    'publish-function-cost': ['statementRatios.publish', 'statementRatios.publishMany100', 'cpuMicrosPerTx.statement.micros'],
    'relay-drain': [
      'headline.relayCpuVsRaw',
      'headline.worstRatio',
      'headline.worstMemoryRatio',
      'headline.relayCpuMsPer1k',
      'headline.postgresCpuMsPer1k',
      'headline.rawCpuMsPer1k',
      'headline.twoInstancesVsOne',
      'headline.hotKeyRatio',
    ],
    'relay-latency': ['headline.worstP99MsDefaults', 'runs.0.p50Ms', 'runs.0.p999Ms', 'runs.1.p99Ms'],
    inbox: ['results.fresh.cpuRatio.median', 'results.fresh.ratio', 'results.duplicates50.ratio', 'results.stale50.ratio'],
    alternatives: [
      'relayVsPgBossOutbox',
      'relayVsNaiveRelay',
      'relayVsTransactionalOutbox',
      'relayVsPgBossOutboxByKeys.10',
      'byKeys.1000.pto.lost',
      'byKeys.1000.pto.duplicated',
    ],
    growth: ['levels.0.drainPerSec.median', 'levels.2.drainPerSec.median', 'levels.2.publishP50Ms.median', 'prune.after.tableMiB'],
    'blocked-key': ['claimRatio', 'drainRatio', 'claimMs.blocked.median'],
    'relay-sweep': ['sweep.0.relayPerSec', 'sweep.0.rawPerSec', 'recommended.batchSize'],
    soak: ['capacityPerSec', 'budgets.p99Growth', 'budgets.sizeGrowth', 'budgets.deadTupleShare', 'perMinute.0.p99Ms'],
    'contract-cost': ['ratios.publishValibot', 'ratios.publishZod', 'ratios.inboxValibot', 'ratios.inboxZod'],
    'relay-load': ['capacityPerSec', 'runs.0.p50Ms', 'runs.0.p99Ms', 'runs.0.p999Ms', 'runs.1.p50Ms'],
  };
  if (!r) return ['(no result file)'];
  return (paths[name] ?? []).filter((p) => {
    const v = p.split('.').reduce<Json>((o, k) => (o == null ? undefined : o[k]), r);
    return typeof v !== 'number' || !Number.isFinite(v);
  });
}
