import type { Server } from 'node:http';
import type { NatsConnection } from '@nats-io/transport-node';
import type pg from 'pg';
import type { DoctorReport } from '../commands/doctor.js';

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
  /**
   * The name recorded with the token's actions (`--operator`): the default of the login form's
   * name field, and the name of a bearer-token request. A claim, not an identity.
   */
  operator?: string;
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

/** What the request handler needs: the options but the port (`ferry relay --console` serves on its own). */
export type ConsoleSetup = Omit<ConsoleOptions, 'port'>;
