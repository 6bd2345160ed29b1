import { type ContractRegistry, consumeData } from '@ferry/contracts';
import { type FerryEvent, type PooledConnection, pgBossDb, type Queryable, withTransaction } from '@ferry/core';
import type { PgBoss } from 'pg-boss';
import { GateRaceError } from './errors.js';
import type { InboxMetrics } from './metrics.js';
import { boundedTransaction, type CompiledInboxOptions } from './options.js';
import { errorText, type GateOutcome } from './outcomes.js';
import type { ParkedJobData } from './parked-job.js';
import { holdEarlyAndCommit } from './sql/early-statements.js';
import { beginAndRecordMessage, beginGate, readKeyRow, transactionBoundsSql } from './sql/gate-statements.js';
import type { Handler, HandlerContext, InboxEvent, TxBoss } from './types.js';

/** An event ready for its handler. */
interface Prepared {
  handler: Handler<string, unknown>;
  payload: unknown;
  contract?: InboxEvent['contract'];
}

/**
 * The payload checked against the contract the event was published under and
 * upcast to its type's newest version, or the park outcome that says why it
 * cannot be (`invalid-data`, `unknown-version`, `upcast-failed`).
 */
async function byContract(contracts: ContractRegistry, event: FerryEvent, prepared: Prepared): Promise<Prepared | GateOutcome> {
  if (!JSON_TYPE.test(event.contentType)) {
    return {
      kind: 'park',
      reason: 'invalid-data',
      error: `${JSON.stringify(event.type)} has a contract, so its data must be JSON; this event's content type is ${JSON.stringify(event.contentType)}`,
    };
  }
  const consumed = await consumeData(contracts, event.type, event.headers, prepared.payload);
  if (!consumed.ok) return { kind: 'park', reason: consumed.reason, error: consumed.error };
  return {
    handler: prepared.handler,
    payload: consumed.value,
    contract: { version: consumed.version, publishedVersion: consumed.fromVersion },
  };
}

export interface GateOptions {
  /** Runs in the transaction before COMMIT on applied, stale and duplicate outcomes (the park worker completes its job there). */
  beforeCommit?: (tx: PooledConnection) => Promise<void>;
  /** SQL sent with COMMIT in one round trip on the same outcomes (the drain deletes the stored version). */
  commitWith?: string;
  /** `sequential`, from the stream: the message to store in `inbox_early` if it is early (outcome `held`); built only then. */
  early?: () => ParkedJobData;
}

const JSON_TYPE = /^application\/([\w.+-]+\+)?json\s*(;.*)?$/i;

/**
 * The version gate and the handler's transaction: one event in, one outcome
 * out. The stream, the stored early versions (`sequential`) and the park
 * worker all go through it.
 */
export class Gate {
  readonly #o: CompiledInboxOptions;
  /** The quoted schema, escaped once. */
  readonly #s: string;
  readonly #metrics: InboxMetrics | undefined;
  /** The started pg-boss (throws before start). */
  readonly #boss: () => PgBoss;
  /** SET LOCAL idle_in_transaction_session_timeout and lock_timeout, sent with each BEGIN. */
  readonly #bounds: string;

  constructor(o: CompiledInboxOptions, s: string, metrics: InboxMetrics | undefined, boss: () => PgBoss) {
    this.#o = o;
    this.#bounds = transactionBoundsSql(o.transactionIdleTimeoutMs, o.lockTimeoutMs);
    this.#s = s;
    this.#metrics = metrics;
    this.#boss = boss;
  }

  #txBoss(tx: Queryable): TxBoss {
    const boss = this.#boss();
    return { send: (name, data, options) => boss.send(name, data ?? null, { ...options, db: pgBossDb(tx) }) };
  }

  /** Why an event cannot reach a handler, or its payload. */
  #prepare(event: FerryEvent): Prepared | GateOutcome {
    const handler = this.#o.handlers.get(event.type);
    if (!handler) return { kind: 'park', reason: 'unknown-type', error: `no handler for event type ${JSON.stringify(event.type)}` };
    if (!JSON_TYPE.test(event.contentType)) return { handler, payload: event.data };
    try {
      return {
        handler,
        payload: JSON.parse(Buffer.from(event.data.buffer, event.data.byteOffset, event.data.byteLength).toString('utf8')),
      };
    } catch (err) {
      return { kind: 'park', reason: 'undecodable-body', error: `${event.contentType} body is not JSON: ${errorText(err)}` };
    }
  }

  /**
   * Version gate (which records the version and takes the row lock) → handler
   * → COMMIT, on a connection of its own. BEGIN travels with the gate, so an
   * applied message costs two round trips besides the handler's, as a plain
   * BEGIN/handler/COMMIT does; a stale or duplicate one costs two and writes
   * nothing. `park` and `gap` outcomes are rolled back (the gate's write, or in
   * `dedupe` mode the message id, is undone). `beforeCommit` runs in the
   * transaction before COMMIT on applied, stale and duplicate outcomes (the
   * park worker completes its job there).
   */
  async run(event: FerryEvent, attempt: number, fromPark: boolean, more: GateOptions = {}): Promise<GateOutcome> {
    const o = this.#o;
    const { beforeCommit, commitWith, early } = more;
    const gateStarted = performance.now();
    // BEGIN travels with the gate's first statement (`begin: null`).
    return withTransaction(
      o.pool,
      async (client, transaction) => {
        const end = async (sql: 'COMMIT' | 'ROLLBACK') => {
          if (sql === 'COMMIT' && beforeCommit) await beforeCommit(client);
          await transaction.end(sql === 'COMMIT' && commitWith ? `${commitWith}; COMMIT` : sql);
        };
        if (o.mode === 'dedupe') {
          if (!(await beginAndRecordMessage(client, this.#s, o.consumer, event.id, this.#bounds))) {
            await end('COMMIT');
            return { kind: 'duplicate' };
          }
        } else {
          const won = await beginGate(
            client,
            this.#s,
            o.consumer,
            event.key,
            event.version,
            {
              sequential: o.mode === 'sequential',
              ignoreParked: fromPark,
            },
            this.#bounds,
          );
          if (!won && early && o.mode === 'sequential' && !fromPark) {
            // An early version is stored under the key's row lock and committed in the same round
            // trip, so the message can be acked (docs/inbox-modes.md).
            const row = await holdEarlyAndCommit(client, this.#s, o.consumer, event.key, event.version, early());
            transaction.ended();
            if (event.version <= row.version) {
              return event.version === row.version ? { kind: 'duplicate' } : { kind: 'stale', recorded: row.version };
            }
            if (row.held) return { kind: 'held', recorded: row.version };
            // The same version is stored already and will be applied (or parked) once: this copy is a duplicate.
            if (row.copy) return { kind: 'duplicate' };
            if (row.parked > 0) {
              return {
                kind: 'park',
                reason: 'behind-parked',
                error: `key ${JSON.stringify(event.key)} has ${row.parked} parked event(s) ahead of it`,
              };
            }
            return { kind: 'gap', recorded: row.version }; // its predecessor committed meanwhile: try again
          }
          if (!won) {
            // Nothing was written. Read why, ending the transaction in the same round trip unless the
            // park worker still has its own bookkeeping to commit.
            const rollbackNow = !beforeCommit;
            const row = await readKeyRow(client, this.#s, o.consumer, event.key, rollbackNow);
            if (rollbackNow) transaction.ended();
            if (event.version <= row.version) {
              if (transaction.open) await end('COMMIT');
              return event.version === row.version ? { kind: 'duplicate' } : { kind: 'stale', recorded: row.version };
            }
            if (transaction.open) await end('ROLLBACK');
            if (o.mode === 'sequential' && !fromPark && row.parked > 0) {
              return {
                kind: 'park',
                reason: 'behind-parked',
                error: `key ${JSON.stringify(event.key)} has ${row.parked} parked event(s) ahead of it`,
              };
            }
            if (o.mode === 'sequential') return { kind: 'gap', recorded: row.version };
            throw new GateRaceError(
              `version gate for key ${JSON.stringify(event.key)} v${event.version} lost to a concurrent writer; retrying`,
            );
          }
        }
        let prepared = this.#prepare(event);
        // Only with contracts: the one await a plain inbox does not pay.
        if (o.contracts && !('kind' in prepared)) prepared = await byContract(o.contracts, event, prepared);
        if ('kind' in prepared) {
          await end('ROLLBACK');
          return prepared;
        }
        const started = performance.now();
        const inboxEvent: InboxEvent = prepared.contract
          ? { ...event, payload: prepared.payload, contract: prepared.contract }
          : { ...event, payload: prepared.payload };
        const ctx: HandlerContext = { tx: client, boss: this.#txBoss(client), consumer: o.consumer, attempt };
        await prepared.handler(inboxEvent, ctx);
        const handled = performance.now();
        await end('COMMIT');
        const committed = performance.now();
        this.#metrics?.handler(handled - started);
        this.#metrics?.gateToCommit(committed - gateStarted);
        return { kind: 'applied', durationMs: committed - started };
      },
      boundedTransaction(o, null),
    );
  }
}
