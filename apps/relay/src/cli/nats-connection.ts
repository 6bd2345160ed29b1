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
import { redactNatsUrls, splitUserinfo } from '../redact.js';
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

/**
 * Runs an authenticator once against a made-up nonce, as the server's
 * challenge would: nats.js parses a creds file and decodes a seed only then,
 * at connect time, and its "unable to parse credentials" or "invalid
 * checksum" looked like a server that is down, so the relay waited for NATS
 * forever. Checked here, a bad one ends the command at once (exit 2). The
 * message names the option and nkeys' fixed reason, never the value.
 */
function checkAuthenticator(option: string, what: string, auth: Authenticator): Authenticator {
  try {
    auth('ferry-check');
  } catch (err) {
    const reason = (err as Error).message;
    throw new ConfigError(
      option,
      `${option} ${what} (${/^n?keys: /.test(reason) || reason === 'unable to parse credentials' ? reason : 'not a valid key'}; value hidden)`,
    );
  }
  return auth;
}

/** The credentials a NATS URL carries: `user:password@` or a token (`token@`), percent-decoded. */
type UrlAuth = { user: string; pass: string } | { token: string };

function decodeUserinfo(part: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    return part; // a stray % (not an escape) is part of the value
  }
}

/**
 * Splits credentials out of the server URLs. nats.js v3 ignores a URL's
 * userinfo (`nats://user:pass@host` got "Authorization Violation"), so they
 * become the connection's `user`/`pass` or `token` and the URLs go to nats.js
 * bare. nats.js has one set of credentials for every server: URLs that carry
 * different ones, or URL credentials beside --nats-user/--nats-token, are
 * refused rather than one of them silently losing.
 */
function splitNatsUrls(urls: readonly string[]): { servers: string[]; auth?: UrlAuth } {
  const servers: string[] = [];
  let auth: UrlAuth | undefined;
  let authKey: string | undefined;
  for (const url of urls) {
    const parts = splitUserinfo(url);
    if (!parts || parts.userinfo === '') {
      servers.push(url);
      continue;
    }
    servers.push(parts.bare);
    if (authKey !== undefined && authKey !== parts.userinfo) {
      throw new ConfigError(
        '--nats-url',
        '--nats-url: the URLs carry different credentials, and a NATS connection has one set for every server: give the same user:password@ (or token@) in each, or none and --nats-user/--nats-password (FERRY_NATS_USER/FERRY_NATS_PASSWORD)',
      );
    }
    authKey = parts.userinfo;
    const colon = parts.userinfo.indexOf(':');
    auth =
      colon >= 0
        ? { user: decodeUserinfo(parts.userinfo.slice(0, colon)), pass: decodeUserinfo(parts.userinfo.slice(colon + 1)) }
        : { token: decodeUserinfo(parts.userinfo) };
  }
  return auth ? { servers, auth } : { servers };
}

/** Flags → `connect()` options of @nats-io/transport-node (servers, credentials, TLS). */
export function natsConnectOptions(flags: NatsFlags): ConnectionOptions {
  const { servers, auth } = splitNatsUrls(flags.natsUrl);
  const options: ConnectionOptions = { servers };
  if (flags.natsPassword !== undefined && flags.natsUser === undefined) {
    throw new ConfigError('--nats-password', '--nats-password needs --nats-user');
  }
  if (auth && (flags.natsUser !== undefined || flags.natsToken !== undefined)) {
    throw new ConfigError(
      '--nats-url',
      '--nats-url carries credentials (user:password@ or token@) and --nats-user or --nats-token (FERRY_NATS_USER, FERRY_NATS_TOKEN) is set too: give them one way',
    );
  }
  if (auth && 'token' in auth) options.token = auth.token;
  else if (auth) Object.assign(options, { user: auth.user, pass: auth.pass });
  if (flags.natsUser !== undefined) {
    options.user = flags.natsUser;
    if (flags.natsPassword !== undefined) options.pass = flags.natsPassword;
  }
  if (flags.natsToken !== undefined) options.token = flags.natsToken;
  const authenticators: Authenticator[] = [];
  if (flags.natsNkeySeed !== undefined) {
    const seed = flags.natsNkeySeed.trim();
    if (!/^SU[A-Z2-7]{50,}$/.test(seed)) {
      throw new ConfigError('--nats-nkey-seed', '--nats-nkey-seed is not a user nkey seed: it starts with SU (value hidden)');
    }
    authenticators.push(
      checkAuthenticator('--nats-nkey-seed', 'is not a valid nkey seed', nkeyAuthenticator(new TextEncoder().encode(seed))),
    );
  }
  const creds = readFile('--nats-creds', flags.natsCreds);
  if (creds !== undefined) {
    authenticators.push(
      checkAuthenticator(
        '--nats-creds',
        `${JSON.stringify(flags.natsCreds)} is not a NATS credentials file (a user JWT block, then a user nkey seed block, as nsc writes it)`,
        credsAuthenticator(new TextEncoder().encode(creds)),
      ),
    );
  }
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
