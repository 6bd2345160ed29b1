import { readFileSync } from 'node:fs';
import { ConfigError } from '@ferry/core';
import {
  type Authenticator,
  type ConnectionOptions,
  connect,
  credsAuthenticator,
  type NatsConnection,
  nkeyAuthenticator,
} from '@nats-io/transport-node';
import { NatsConnectError } from '../errors.js';
import { redactNatsUrls } from '../redact.js';
import { CLI_DEFAULTS } from './defaults.js';
import type { NatsFlags } from './shared-options.js';

// The one place that turns the NATS flags into connect() options, for `ferry relay` and every operator command.

function readFile(option: string, path: string | undefined): string | undefined {
  if (path === undefined) return undefined;
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError(
      option,
      `${option} ${JSON.stringify(path)} cannot be read (${(err as NodeJS.ErrnoException).code}): give a readable file`,
    );
  }
}

/** Flags → `connect()` options of @nats-io/transport-node (servers, credentials, TLS). */
export function natsConnectOptions(flags: NatsFlags): ConnectionOptions {
  const options: ConnectionOptions = { servers: flags.natsUrl };
  if (flags.natsPassword !== undefined && flags.natsUser === undefined) {
    throw new ConfigError('--nats-password', '--nats-password needs --nats-user');
  }
  if (flags.natsUser !== undefined) {
    options.user = flags.natsUser;
    if (flags.natsPassword !== undefined) options.pass = flags.natsPassword;
  }
  if (flags.natsToken !== undefined) options.token = flags.natsToken;
  const authenticators: Authenticator[] = [];
  if (flags.natsNkeySeed !== undefined) {
    if (!/^SU[A-Z2-7]{50,}$/.test(flags.natsNkeySeed.trim())) {
      throw new ConfigError('--nats-nkey-seed', '--nats-nkey-seed is not a user nkey seed: it starts with SU (value hidden)');
    }
    authenticators.push(nkeyAuthenticator(new TextEncoder().encode(flags.natsNkeySeed.trim())));
  }
  const creds = readFile('--nats-creds', flags.natsCreds);
  if (creds !== undefined) authenticators.push(credsAuthenticator(new TextEncoder().encode(creds)));
  if (authenticators.length > 0) options.authenticator = authenticators.length === 1 ? authenticators[0] : authenticators;
  if (flags.natsTlsCa || flags.natsTlsCert || flags.natsTlsKey) {
    if (Boolean(flags.natsTlsCert) !== Boolean(flags.natsTlsKey)) {
      throw new ConfigError('--nats-tls-cert', '--nats-tls-cert and --nats-tls-key go together');
    }
    const ca = readFile('--nats-tls-ca', flags.natsTlsCa);
    const cert = readFile('--nats-tls-cert', flags.natsTlsCert);
    const key = readFile('--nats-tls-key', flags.natsTlsKey);
    options.tls = { ...(ca ? { ca } : {}), ...(cert ? { cert } : {}), ...(key ? { key } : {}) };
  }
  return options;
}

/**
 * A connection for one operator command (status, replay, doctor, verify): the
 * same options as `ferry relay`, but it fails at once rather than waiting for a
 * server that is down.
 */
export async function connectNats(flags: NatsFlags, name: string): Promise<NatsConnection> {
  const options: ConnectionOptions = {
    ...natsConnectOptions(flags),
    name,
    maxReconnectAttempts: 0,
    timeout: CLI_DEFAULTS.connectTimeoutMs,
  };
  try {
    return await connect(options);
  } catch (err) {
    throw new NatsConnectError(
      `NATS at ${redactNatsUrls(flags.natsUrl).join(',')} is not reachable (${(err as Error).message}): start it or pass --nats-url`,
      { cause: err },
    );
  }
}
