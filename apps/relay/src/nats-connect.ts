import { type ConnectionOptions, connect, type NatsConnection, errors as natsErrors } from '@nats-io/transport-node';
import { NatsConnectError, StartAbandonedError } from './errors.js';
import type { Logger } from './types.js';

/** Node's TLS certificate verification errors (self-signed, unknown CA, wrong host name, expired). */
function isTlsVerificationError(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /CERT|SELF_SIGNED|UNABLE_TO_VERIFY|HOSTNAME|ERR_TLS/.test(code);
}

/** `host:port` of each NATS server, for the log: never the user or password a URL may carry. */
export function natsServerNames(servers: string | string[] | undefined): string[] {
  const list = servers === undefined ? ['127.0.0.1:4222'] : Array.isArray(servers) ? servers : [servers];
  return list.map((u) => {
    try {
      return new URL(u.includes('://') ? u : `nats://${u}`).host;
    } catch {
      return '(invalid URL)';
    }
  });
}

/** First-connect failures that are the configuration's fault, not the server's absence. */
const NATS_CONFIG_ERRORS = [
  natsErrors.AuthorizationError,
  natsErrors.UserAuthenticationExpiredError,
  natsErrors.PermissionViolationError,
  natsErrors.InvalidArgumentError,
];

/**
 * Connects, retrying every `reconnectTimeWait` while the server is unreachable. Not nats.js's
 * `waitOnFirstConnect`: its promise cannot be abandoned, so a signal during the wait took the
 * whole shutdown timeout (30 s, then a forced exit), and it logged nothing while it waited.
 * The wait is logged once (and its end once); `abandoned` (the relay's `stop()`) ends it at once.
 */
export async function connectWhenReachable(
  natsOptions: ConnectionOptions & { reconnectTimeWait: number },
  { servers, logger, abandoned }: { servers: string[]; logger: Logger; abandoned: Promise<'stop'> },
): Promise<NatsConnection> {
  let waiting = false;
  for (;;) {
    const attempt = connect({ ...natsOptions, waitOnFirstConnect: false });
    const outcome = await Promise.race([
      attempt.then(
        (nc) => ({ nc }),
        (err: unknown) => ({ err }),
      ),
      abandoned,
    ]);
    if (outcome === 'stop') {
      attempt.then((nc) => nc.close()).catch(() => {}); // a late connection must not keep the process alive
      throw new StartAbandonedError();
    }
    if ('nc' in outcome) {
      if (waiting) logger.info({ event: 'nats-available', servers }, 'NATS is reachable again: starting');
      return outcome.nc;
    }
    const err = outcome.err;
    if (isTlsVerificationError(err))
      throw new NatsConnectError(`NATS TLS: ${(err as Error).message} (check --nats-tls-ca)`, { cause: err });
    // Wrong credentials or options: waiting would never cure them, so the start ends with the reason.
    if (NATS_CONFIG_ERRORS.some((type) => err instanceof type)) throw new NatsConnectError((err as Error).message, { cause: err });
    if (!waiting) {
      waiting = true;
      logger.warn(
        { event: 'nats-waiting', servers, reason: (err as Error)?.message },
        `waiting for NATS at ${servers.join(', ')} (${(err as Error)?.message}): /readyz reports not ready until it answers`,
      );
    }
    let timer: NodeJS.Timeout | undefined;
    const pause = new Promise<'again'>((resolve) => {
      timer = setTimeout(() => resolve('again'), natsOptions.reconnectTimeWait);
    });
    const next = await Promise.race([pause, abandoned]);
    clearTimeout(timer);
    if (next === 'stop') throw new StartAbandonedError();
  }
}
