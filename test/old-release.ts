// The earlier release the upgrade and version-skew tests run: the commit scripts/build-old-release.sh
// names, built once into a cache (.ci/run builds it before the tests; here it is built when missing).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { databaseUrl, natsUrl } from '@ferry/testkit';

export const REPO = fileURLToPath(new URL('../..', import.meta.url));

/** The directory of the earlier release's built tree (its packages' dist folders and node_modules). */
export function oldReleaseDir(): string {
  const started = performance.now();
  const dir = execFileSync(join(REPO, 'scripts/build-old-release.sh'), {
    cwd: REPO,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  })
    .trim()
    .split('\n')
    .at(-1);
  assert.ok(dir, 'scripts/build-old-release.sh printed the directory of the built release');
  const took = Math.round(performance.now() - started);
  if (took > 1_000) console.log(`# built the earlier release in ${took} ms`);
  return dir;
}

/** The earlier release's `ferry` CLI. */
export function oldFerryBin(): string {
  return join(oldReleaseDir(), 'apps/relay/bin/ferry.js');
}

/**
 * The flags of a `ferry relay` of either release in these tests: the shared servers, no
 * maintenance, any HTTP port, a short lease term (a killed relay's lanes free in `leaseTermMs`)
 * and a 100 ms poll.
 */
export function testRelayArgs(schema: string, leaseTermMs: number, extra: string[] = []): string[] {
  return [
    '--database-url',
    databaseUrl(),
    '--schema',
    schema,
    '--nats-url',
    natsUrl(),
    '--no-maintenance',
    '--http-port',
    '0',
    '--lease-term-ms',
    String(leaseTermMs),
    '--poll-interval-ms',
    '100',
    ...extra,
  ];
}
