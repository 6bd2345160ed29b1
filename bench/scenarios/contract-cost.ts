/**
 * What event contracts cost (issue 45): the CPU a contract adds to a publish
 * and to an inbox message, with valibot and with zod, against the plain path
 * measured in the same run. A 10-field event.
 *
 * A contract adds two things to a publish: the validator's run and the stamp
 * (two headers in the row) in this process, and the publish functions'
 * checks of those headers in PostgreSQL. Each is measured where it can be
 * resolved, rather than as the difference of two end-to-end runs (two
 * publisher instances measured alike differed by ~10 % on this machine, more
 * than the effect):
 * - plain: one connection, one transaction per event (BEGIN; publish;
 *   COMMIT), `synchronous_commit = off`; this process's CPU plus the
 *   backend's (/proc), per event;
 * - node: `publish` on a stand-in connection that answers at once, plain,
 *   valibot and zod in rotating order, per event;
 * - PostgreSQL: the publish function called in a loop inside the server, with
 *   no headers and with the two contract headers, the backend's CPU per call.
 * publish ratio = (plain + node difference + PostgreSQL difference) ÷ plain.
 *
 * Inbox: a plain inbox applies a stream of the events (one-row upsert each),
 * this process's CPU per message; the contract's part is `consumeData` on the
 * same data and headers, per event. inbox ratio = (plain + that) ÷ plain.
 *
 *   node bench/dist/scenarios/contract-cost.js [--events 4000] [--rounds 3] [--quick]
 */
import { consumeData, defineContracts, defineEvent } from '@ferry/contracts';
import { encodeEvent, type FerryEvent, quoteIdentifier } from '@ferry/core';
import { createInbox, SILENT_LOGGER } from '@ferry/inbox';
import { createPublisher } from '@ferry/publisher';
import { createTestDatabase, createTestStream, waitFor } from '@ferry/testkit';
import { jetstream } from '@nats-io/jetstream';
import { headers as natsHeaders } from '@nats-io/transport-node';
import * as v from 'valibot';
import { z } from 'zod';
import { benchFlags } from '../lib/args.js';
import { cpuSecondsOf } from '../lib/proc.js';
import { publishStandIn } from '../lib/stand-in.js';
import { printTable, type Summary, summarize, writeResult } from '../lib/stats.js';

const flags = benchFlags(
  'The CPU of a publish and of an inbox message with a contract (valibot, zod) against the plain path, 10-field event.',
  {
    quick: 'small sizes, for the smoke run',
    events: ['<n> events per variant and round', 4000, 400],
    rounds: ['<n> measured rounds after one warm-up round', 3, 1],
  },
);
const EVENTS = flags.events;
const ROUNDS = flags.rounds;
/** Publishes per variant and round on the stand-in connection, and consumeData calls. */
const NODE_EVENTS = EVENTS * 10;
/** Calls of the publish function per variant and round, inside PostgreSQL. */
const PG_CALLS = EVENTS * 5;

const CHANNELS = ['web', 'shop', 'phone'] as const;
const valibotSchema = v.object({
  orderId: v.pipe(v.string(), v.uuid()),
  customerId: v.pipe(v.string(), v.minLength(1)),
  email: v.pipe(v.string(), v.email()),
  totalCents: v.pipe(v.number(), v.integer(), v.minValue(0)),
  currency: v.pipe(v.string(), v.length(3)),
  items: v.pipe(v.number(), v.integer(), v.minValue(1)),
  channel: v.picklist(CHANNELS),
  placedAt: v.pipe(v.string(), v.isoTimestamp()),
  country: v.pipe(v.string(), v.length(2)),
  note: v.optional(v.string()),
});
const zodSchema = z.object({
  orderId: z.uuid(),
  customerId: z.string().min(1),
  email: z.email(),
  totalCents: z.number().int().min(0),
  currency: z.string().length(3),
  items: z.number().int().min(1),
  channel: z.enum(CHANNELS),
  placedAt: z.iso.datetime(),
  country: z.string().length(2),
  note: z.string().optional(),
});
const contractsOf = (schema: typeof valibotSchema | typeof zodSchema) =>
  defineContracts([defineEvent({ type: 'OrderPlaced', version: 1, subject: 'bench.orders.placed', schema })]);
const registries = { valibot: contractsOf(valibotSchema), zod: contractsOf(zodSchema) };
const VARIANTS = ['plain', 'valibot', 'zod'] as const;
type Variant = (typeof VARIANTS)[number];

const data = (i: number) => ({
  orderId: `0193a0c4-6b1e-7c3d-8e2f-${String(i).padStart(12, '0')}`,
  customerId: `customer-${i % 977}`,
  email: `customer${i % 977}@example.com`,
  totalCents: 1000 + (i % 5000),
  currency: 'EUR',
  items: 1 + (i % 7),
  channel: CHANNELS[i % 3] as (typeof CHANNELS)[number],
  placedAt: '2026-12-05T07:30:00.000Z',
  country: 'DE',
  note: i % 2 ? 'leave at the door' : undefined,
});

type Db = Awaited<ReturnType<typeof createTestDatabase>>;

/** An SQL string literal (for the DO block, which takes no parameters). */
const literal = (text: string) => `'${text.replaceAll("'", "''")}'`;

/** The plain publish's CPU per event, this process and the backend, one transaction each. */
async function plainPublish(db: Db) {
  const publisher = createPublisher({ schema: db.schema, source: 'bench' });
  const client = await db.pool.connect();
  try {
    await client.query('SET synchronous_commit = off');
    const backend = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid ?? 0;
    const samples: number[] = [];
    let n = 0;
    for (let round = 0; round <= ROUNDS; round++) {
      const node0 = process.cpuUsage();
      const pg0 = cpuSecondsOf(backend) ?? 0;
      for (let i = 0; i < EVENTS; i++, n++) {
        await client.query('BEGIN');
        await publisher.publish(client, { subject: 'bench.orders.placed', key: `k-${n % 1000}`, type: 'OrderPlaced', data: data(n) });
        await client.query('COMMIT');
      }
      const used = process.cpuUsage(node0);
      if (round > 0) samples.push((used.user + used.system + ((cpuSecondsOf(backend) ?? 0) - pg0) * 1e6) / EVENTS);
    }
    return summarize(samples);
  } finally {
    client.release();
  }
}

/** This process's CPU per publish on the stand-in, per variant, in rotating order. */
async function nodePublish() {
  const publishers = {
    plain: createPublisher({ schema: 'bench', source: 'bench' }),
    valibot: createPublisher({ schema: 'bench', source: 'bench', contracts: registries.valibot }),
    zod: createPublisher({ schema: 'bench', source: 'bench', contracts: registries.zod }),
  };
  const tx = publishStandIn();
  const samples: Record<Variant, number[]> = { plain: [], valibot: [], zod: [] };
  for (let round = 0; round <= ROUNDS * 3; round++) {
    for (let j = 0; j < VARIANTS.length; j++) {
      const variant = VARIANTS[(round + j) % VARIANTS.length] as Variant;
      const cpu0 = process.cpuUsage();
      for (let i = 0; i < NODE_EVENTS; i++) {
        await publishers[variant].publish(tx, { subject: 'bench.orders.placed', key: `k-${i % 1000}`, type: 'OrderPlaced', data: data(i) });
      }
      const used = process.cpuUsage(cpu0);
      if (round > 0) samples[variant].push((used.user + used.system) / NODE_EVENTS);
    }
  }
  return Object.fromEntries(VARIANTS.map((k) => [k, summarize(samples[k])])) as Record<Variant, Summary>;
}

/** The backend's CPU per call of the publish function, without headers and with the two a contract stamps. */
async function pgPublish(db: Db) {
  const s = quoteIdentifier(db.schema);
  const client = await db.pool.connect();
  try {
    await client.query('SET synchronous_commit = off');
    const backend = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid ?? 0;
    const body = `convert_to(${literal(JSON.stringify(data(1)))}, 'UTF8')`;
    const loop = (headers: string) => `DO $loop$ BEGIN
      FOR i IN 1..${PG_CALLS} LOOP
        PERFORM * FROM ${s}.publish_event(gen_random_uuid(), 'k-' || (i % 1000), NULL, 'bench.orders.placed', 'OrderPlaced', 'bench',
          'application/json', ${body}, ${literal(headers)}::jsonb, now(), NULL, false);
      END LOOP; END $loop$`;
    const variants = { none: loop('{}'), stamp: loop(JSON.stringify({ 'ce-dataschema': 'ferry:OrderPlaced/v1', 'ce-dataversion': '1' })) };
    const samples: Record<keyof typeof variants, number[]> = { none: [], stamp: [] };
    for (let round = 0; round <= ROUNDS * 2; round++) {
      for (const name of (round % 2 ? ['stamp', 'none'] : ['none', 'stamp']) as Array<keyof typeof variants>) {
        const cpu0 = cpuSecondsOf(backend) ?? 0;
        await client.query(variants[name]);
        if (round > 0) samples[name].push((((cpuSecondsOf(backend) ?? 0) - cpu0) * 1e6) / PG_CALLS);
      }
    }
    return { none: summarize(samples.none), stamp: summarize(samples.stamp) };
  } finally {
    client.release();
  }
}

/** `consumeData` per event: what a contract adds to an inbox message in this process. */
async function consumeCost() {
  const headers = { 'ce-dataschema': 'ferry:OrderPlaced/v1', 'ce-dataversion': '1' };
  const payloads = Array.from({ length: 1000 }, (_, i) => JSON.parse(JSON.stringify(data(i))));
  const samples: Record<'valibot' | 'zod', number[]> = { valibot: [], zod: [] };
  for (let round = 0; round <= ROUNDS * 3; round++) {
    for (const name of (round % 2 ? ['zod', 'valibot'] : ['valibot', 'zod']) as Array<'valibot' | 'zod'>) {
      const cpu0 = process.cpuUsage();
      for (let i = 0; i < NODE_EVENTS; i++) {
        const r = await consumeData(registries[name], 'OrderPlaced', headers, payloads[i % 1000]);
        if (!r.ok) throw new Error(`${name}: the bench's event does not fit its contract: ${r.error}`);
      }
      const used = process.cpuUsage(cpu0);
      if (round > 0) samples[name].push((used.user + used.system) / NODE_EVENTS);
    }
  }
  return { valibot: summarize(samples.valibot), zod: summarize(samples.zod) };
}

/** A plain inbox's CPU per message (this process), applying a stream of the events. */
async function plainInbox(db: Db) {
  const stream = await createTestStream({ prefix: 'bench_contracts' });
  const s = quoteIdentifier(db.schema);
  try {
    await db.pool.query(`CREATE TABLE ${s}.proj (key text PRIMARY KEY, total bigint NOT NULL)`);
    const js = jetstream(stream.nc);
    const acks: Promise<unknown>[] = [];
    for (let i = 0; i < EVENTS; i++) {
      const event: FerryEvent = {
        id: crypto.randomUUID(),
        key: `k-${i % 1000}`,
        version: BigInt(Math.floor(i / 1000) + 1),
        subject: `${stream.prefix}.placed`,
        type: 'OrderPlaced',
        source: 'bench',
        time: new Date(),
        contentType: 'application/json',
        data: Buffer.from(JSON.stringify(data(i))),
        headers: { 'ce-dataschema': 'ferry:OrderPlaced/v1', 'ce-dataversion': '1' },
      };
      const enc = encodeEvent(event);
      const h = natsHeaders();
      for (const [name, value] of enc.headers) h.set(name, value);
      acks.push(js.publish(enc.subject, enc.body, { headers: h }));
      if (acks.length >= 512) await Promise.all(acks.splice(0));
    }
    await Promise.all(acks);
    const samples: number[] = [];
    for (let round = 0; round <= ROUNDS; round++) {
      {
        let applied = 0;
        const inbox = createInbox({
          pool: db.pool,
          nc: stream.nc,
          stream: stream.name,
          consumer: `plain_${round}`,
          schema: db.schema,
          logger: SILENT_LOGGER,
          pullExpiresMs: 2_000,
          handlers: {
            OrderPlaced: async (event, { tx }) => {
              await tx.query(`INSERT INTO ${s}.proj (key, total) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET total = excluded.total`, [
                event.key,
                (event.payload as { totalCents: number }).totalCents,
              ]);
              applied++;
            },
          },
        });
        const cpu0 = process.cpuUsage();
        await inbox.start();
        await waitFor(() => applied === EVENTS, { what: 'every event applied', timeoutMs: 300_000 });
        const used = process.cpuUsage(cpu0);
        await inbox.stop();
        if (round > 0) samples.push((used.user + used.system) / EVENTS);
      }
    }
    return summarize(samples);
  } finally {
    await stream.close();
  }
}

async function main() {
  const db = await createTestDatabase({ prefix: 'bench_contracts', migrate: ['outbox', 'inbox'], max: 40 });
  try {
    const publish = await plainPublish(db);
    const node = await nodePublish();
    const pg = await pgPublish(db);
    const inbox = await plainInbox(db);
    const consume = await consumeCost();
    const pgExtra = pg.stamp.median - pg.none.median;
    const added = (k: 'valibot' | 'zod') => node[k].median - node.plain.median + pgExtra;
    const ratios = {
      publishValibot: (publish.median + added('valibot')) / publish.median,
      publishZod: (publish.median + added('zod')) / publish.median,
      inboxValibot: (inbox.median + consume.valibot.median) / inbox.median,
      inboxZod: (inbox.median + consume.zod.median) / inbox.median,
    };
    const us = (x: Summary) => `${x.median.toFixed(2)} ±${(x.spread * 100).toFixed(0)}%`;
    printTable(
      `Contract cost per event, 10-field event (medians of ${ROUNDS}+ rounds)`,
      ['part', 'CPU µs per event'],
      [
        ['publish, plain: this process + PostgreSQL, one transaction each', us(publish)],
        ['  publisher work (stand-in connection), plain', us(node.plain)],
        ['  publisher work (stand-in connection), valibot', us(node.valibot)],
        ['  publisher work (stand-in connection), zod', us(node.zod)],
        ['  publish function in PostgreSQL, no headers', us(pg.none)],
        ['  publish function in PostgreSQL, the contract headers', us(pg.stamp)],
        ['inbox, plain: this process per message', us(inbox)],
        ['  consumeData, valibot', us(consume.valibot)],
        ['  consumeData, zod', us(consume.zod)],
      ],
    );
    printTable(
      'Contract cost as a share of the plain path',
      ['figure', 'ratio'],
      Object.entries(ratios).map(([k, r]) => [k, r.toFixed(3)]),
    );
    const file = writeResult('contract-cost', {
      scenario: 'contract-cost',
      events: EVENTS,
      rounds: ROUNDS,
      fields: 10,
      publishPlainUs: publish,
      publisherNodeUs: node,
      publishFunctionUs: pg,
      inboxPlainUs: inbox,
      consumeDataUs: consume,
      ratios,
    });
    console.log(`\nwrote ${file}`);
  } finally {
    await db.close();
  }
}

await main();
