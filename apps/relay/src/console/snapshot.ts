import type { StatusReport } from '../commands/status.js';
import { readStatus } from '../commands/status.js';
import { MinuteHistory } from './charts.js';
import type { ConsoleContext } from './page-kit.js';
import { bossJobTable, type MinuteStat, type ParkedCount, parkedCounts } from './queries.js';
import type { NatsView } from './streams.js';

export interface Snapshot {
  at: number;
  status?: StatusReport;
  parked: ParkedCount[];
  jobTable: string | null;
  lag: NatsView;
  minutes: MinuteStat[];
  /** The newest whole minute the chart read (the overview's "published, last full minute"). */
  lastMinute?: MinuteStat;
  /** How long its database reads took (the status, the parked counts): the next one waits PACE times as long (see `paced`). */
  tookMs: number;
  error?: string;
}

/** How long a page waits for the first snapshot before it shows a placeholder that fills in by itself. */
const FIRST_READ_WAIT_MS = 400;

export function consoleSnapshot(c: ConsoleContext, natsView: () => Promise<NatsView>) {
  const { o, longPool, paced, pace } = c;
  // The overview's numbers: `ferry status`'s exact counts over every pending row (seconds at a million
  // rows), so read by one reader for every viewer, at most once per refresh interval and only while
  // someone looks; a page is a read of the last snapshot, however many tabs refresh.
  let snapshot: Snapshot | undefined;
  let reading: Promise<Snapshot> | undefined;
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
          readStatus(longPool, o.schema, { publishedLastMinute: false, bossSchema: o.bossSchema }).finally(() => {
            statusMs = Date.now() - at;
          }),
          bossJobTable(o.pool, o.bossSchema),
          natsView(),
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
  c.onChanged(() => {
    snapshot = undefined;
  });

  /** The snapshot to show now: the last one (read again in the background when due), or the first, if it comes within FIRST_READ_WAIT_MS. */
  async function view(): Promise<Snapshot | undefined> {
    return snapshot
      ? await currentSnapshot()
      : await Promise.race([
          readSnapshot(),
          new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), FIRST_READ_WAIT_MS).unref()),
        ]);
  }

  return { view };
}

export type ConsoleSnapshot = ReturnType<typeof consoleSnapshot>;
