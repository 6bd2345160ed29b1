// Issue 43 item 4: the stream path and the park worker decoded one message two ways. A 300-character
// key and a `CE-SEQUENCE` header were refused by the stream (parked as undecodable-headers) and
// then applied by the park worker (case-insensitive headers, no key check); a lowercase
// `content-type` was ignored by the stream, so a body declared JSON was applied as raw bytes.
// Now both paths decode with `decodeMessage`: none of these is ever applied.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { waitFor } from '@ferry/testkit';
import { EFFECT_SQL, ferryEvent, type InboxFixture, inboxFixture, publishEvents, publishRaw } from './inbox-support.js';

let f: InboxFixture | undefined;
after(() => f?.close());

const base = (key: string): Record<string, string> => ({
  'ce-specversion': '1.0',
  'ce-id': crypto.randomUUID(),
  'ce-source': 'test',
  'ce-type': 'Set',
  'ce-partitionkey': key,
  'ce-sequence': '00000000000000000001',
  'Content-Type': 'application/json',
});

test('inbox - a message the stream refuses is never applied by the park worker: long key, CE-SEQUENCE, lowercase content-type', async () => {
  f = await inboxFixture();
  const fx = f;
  const inbox = fx.inbox({
    mode: 'latest',
    parkRetryLimit: 1,
    parkRetryDelayMs: 1_000,
    handlers: {
      Set: async (event, { tx }) => {
        await tx.query(EFFECT_SQL(fx.s).effect, [event.key, event.version.toString()]);
      },
    },
  });
  await inbox.start();
  const longKey = 'k'.repeat(300);
  const { 'ce-sequence': seq, ...upper } = base('upper-seq');
  const { 'Content-Type': ct, ...lowerCt } = base('lower-ct');
  const poison: Array<[string, Record<string, string>, string]> = [
    [longKey, base(longKey), '{"n":1}'],
    ['upper-seq', { ...upper, 'CE-SEQUENCE': seq as string }, '{"n":1}'],
    ['lower-ct', { ...lowerCt, 'content-type': ct as string }, 'not json'],
  ];
  for (const [, headers, body] of poison) await publishRaw(fx.stream.nc, `${fx.stream.prefix}.raw`, headers, Buffer.from(body));
  await publishEvents(fx.stream.nc, [ferryEvent(fx.stream.prefix, { key: 'good', version: 1 })]);

  const bad = new Set(poison.map(([key]) => key));
  // Settled: each poison message is either applied (the bug) or its parked job failed for good
  // (the park worker tried it parkRetryLimit + 1 times and refused it each time).
  const settled = async () => {
    const applied = (await fx.effects()).filter((e) => bad.has(e.key)).length;
    const { rows } = await fx.db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM "${fx.bossSchema}".job WHERE name = $1 AND state = 'failed'`,
      [inbox.parkQueue],
    );
    return applied + (rows[0]?.n ?? 0) >= poison.length && (await fx.effects()).some((e) => e.key === 'good');
  };
  await waitFor(settled, { timeoutMs: 120_000, what: 'every poison message applied or failed by the park worker' });

  assert.deepEqual(
    (await fx.effects()).map((e) => e.key),
    ['good'],
    'only the good event applied: the park worker refused what the stream refused',
  );
  const parked = fx.reports.filter((r) => r.kind === 'parked');
  assert.equal(parked.length, 3, 'each of the three parked from the stream');
  for (const r of parked) assert.equal(r.kind === 'parked' && r.reason, 'undecodable-headers');
  const errors = parked.map((r) => (r.kind === 'parked' ? r.error : '')).join('\n');
  assert.match(errors, /ce-partitionkey/);
  assert.match(errors, /"CE-SEQUENCE" is ce-sequence spelled in another case/);
  assert.match(errors, /"content-type" is Content-Type spelled in another case/);
  const { rows: failed } = await fx.db.pool.query<{ output: { message?: string } }>(
    `SELECT output FROM "${fx.bossSchema}".job WHERE name = $1 AND state = 'failed'`,
    [inbox.parkQueue],
  );
  assert.equal(failed.length, 3);
  for (const j of failed) assert.match(String(j.output?.message), /ce-partitionkey|spelled in another case/);
});
