import type pg from 'pg';
import type { CompiledRelayOptions } from '../types.js';

/**
 * Every wait on PostgreSQL bounded, for the relay's pool and its lease
 * connection: connecting, each statement (server side, and the client gives
 * up a second later in case the server never answers), and a dead peer found
 * by TCP keepalive on both sides in seconds rather than hours; the server
 * also drops a peer that acknowledges nothing for 3 x the keepalive time
 * (`tcp_user_timeout`), ending an orphaned backend in a partition.
 */
export function pgBounds(o: CompiledRelayOptions): pg.PoolConfig & { options: string } {
  const idleS = Math.max(1, Math.round(o.pgKeepaliveMs / 1000));
  return {
    connectionTimeoutMillis: o.pgConnectTimeoutMs,
    statement_timeout: o.pgStatementTimeoutMs,
    query_timeout: o.pgStatementTimeoutMs + 1000,
    keepAlive: true,
    keepAliveInitialDelayMillis: o.pgKeepaliveMs,
    options: `-c tcp_keepalives_idle=${idleS} -c tcp_keepalives_interval=${idleS} -c tcp_keepalives_count=3 -c tcp_user_timeout=${3 * o.pgKeepaliveMs}`,
  };
}
