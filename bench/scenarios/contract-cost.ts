/**
 * What event contracts cost (issue 45): the CPU of a publish and of an inbox
 * message, with a contract checked by valibot and by zod, beside the plain
 * path, in one run. A 10-field event.
 *
 * Publish: one connection, one transaction per event (BEGIN; publish;
 * COMMIT), `synchronous_commit = off` so the WAL flush does not dominate.
 * CPU is this process's (process.cpuUsage) plus the backend's (/proc), per
 * event. Variants interleave in rounds; the first round warms up. The ratio
 * is each variant's median over plain's.
 *
 * Inbox: the same events in a stream, stamped as a contract publisher stamps
 * them; an inbox per variant (its own durable consumer) applies every one
 * with a one-row upsert, and the process's CPU per message is counted.
 *
 *   node bench/dist/scenarios/contract-cost.js [--events 4000] [--rounds 3] [--quick]
 */
import { defineContracts, defineEvent } from '@ferry/contracts';
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
import { printTable, summarize, writeResult } from '../lib/stats.js';

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
/** Events a variant publishes before the next takes its turn. */
const CHUNK = 100;
if (EVENTS % CHUNK !== 0) throw new Error(`--events must be a multiple of ${CHUNK}, got ${EVENTS}`);

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

const ratio = (r: Record<string, { median: number }>, k: Variant) => (r[k]?.median ?? Number.NaN) / (r.plain?.median ?? Number.NaN);

async function publishCost(db: Awaited<ReturnType<typeof createTestDatabase>>) {
  const publishers = {
    plain: createPublisher({ schema: db.schema, source: 'bench' }),
    valibot: createPublisher({ schema: db.schema, source: 'bench', contracts: registries.valibot }),
    zod: createPublisher({ schema: db.schema, source: 'bench', contracts: registries.zod }),
  };
  const client = await db.pool.connect();
  try {
    await client.query('SET synchronous_commit = off');
    const backend = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid ?? 0;
    const samples: Record<Variant, { total: number[]; node: number[] }> = {
      plain: { total: [], node: [] },
      valibot: { total: [], node: [] },
      zod: { total: [], node: [] },
    };
    // Variants take turns every CHUNK events, in a rotating order, so a change in the machine's load
    // falls on all three alike; a round's figure is the sum over its chunks.
    let n = 0;
    for (let round = 0; round <= ROUNDS; round++) {
      const sums: Record<Variant, { node: number; pg: number }> = {
        plain: { node: 0, pg: 0 },
        valibot: { node: 0, pg: 0 },
        zod: { node: 0, pg: 0 },
      };
      for (let chunk = 0; chunk < EVENTS / CHUNK; chunk++) {
        for (let j = 0; j < VARIANTS.length; j++) {
          const variant = VARIANTS[(chunk + j) % VARIANTS.length] as Variant;
          const p = publishers[variant];
          const node0 = process.cpuUsage();
          const pg0 = cpuSecondsOf(backend) ?? 0;
          for (let i = 0; i < CHUNK; i++, n++) {
            await client.query('BEGIN');
            await p.publish(client, { subject: 'bench.orders.placed', key: `k-${n % 1000}`, type: 'OrderPlaced', data: data(n) });
            await client.query('COMMIT');
          }
          const used = process.cpuUsage(node0);
          sums[variant].node += used.user + used.system;
          sums[variant].pg += ((cpuSecondsOf(backend) ?? 0) - pg0) * 1e6;
        }
      }
      if (round === 0) continue; // warm-up
      for (const variant of VARIANTS) {
        samples[variant].node.push(sums[variant].node / EVENTS);
        samples[variant].total.push((sums[variant].node + sums[variant].pg) / EVENTS);
      }
    }
    const total = Object.fromEntries(VARIANTS.map((k) => [k, summarize(samples[k].total)]));
    const node = Object.fromEntries(VARIANTS.map((k) => [k, summarize(samples[k].node)]));
    return { total, node };
  } finally {
    client.release();
  }
}

async function inboxCost(db: Awaited<ReturnType<typeof createTestDatabase>>) {
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
    const samples: Record<Variant, number[]> = { plain: [], valibot: [], zod: [] };
    for (let round = 0; round <= ROUNDS; round++) {
      for (const variant of VARIANTS) {
        let applied = 0;
        const inbox = createInbox({
          pool: db.pool,
          nc: stream.nc,
          stream: stream.name,
          consumer: `${variant}_${round}`,
          schema: db.schema,
          logger: SILENT_LOGGER,
          pullExpiresMs: 2_000,
          ...(variant === 'plain' ? {} : { contracts: registries[variant] }),
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
        await waitFor(() => applied === EVENTS, { what: `${variant}: every event applied`, timeoutMs: 300_000 });
        const used = process.cpuUsage(cpu0);
        await inbox.stop();
        if (round > 0) samples[variant].push((used.user + used.system) / EVENTS);
      }
    }
    return Object.fromEntries(VARIANTS.map((k) => [k, summarize(samples[k])]));
  } finally {
    await stream.close();
  }
}

async function main() {
  const db = await createTestDatabase({ prefix: 'bench_contracts', migrate: ['outbox', 'inbox'], max: 40 });
  try {
    const publish = await publishCost(db);
    const inbox = await inboxCost(db);
    const rows = (label: string, r: Record<string, { median: number; spread: number }>) =>
      VARIANTS.map((k) => [
        label,
        k,
        r[k]?.median.toFixed(1) ?? '-',
        `±${((r[k]?.spread ?? 0) * 100).toFixed(0)}%`,
        ratio(r, k).toFixed(3),
      ]);
    printTable(
      `Contract cost per event, 10-field event (median of ${ROUNDS} rounds of ${EVENTS})`,
      ['where', 'variant', 'CPU µs per event', 'spread', 'over plain'],
      [...rows('publish: node + PostgreSQL', publish.total), ...rows('publish: node only', publish.node), ...rows('inbox: node', inbox)],
    );
    const file = writeResult('contract-cost', {
      scenario: 'contract-cost',
      events: EVENTS,
      rounds: ROUNDS,
      fields: 10,
      publishCpuUs: publish.total,
      publishNodeCpuUs: publish.node,
      inboxCpuUs: inbox,
      ratios: {
        publishValibot: ratio(publish.total, 'valibot'),
        publishZod: ratio(publish.total, 'zod'),
        publishNodeValibot: ratio(publish.node, 'valibot'),
        publishNodeZod: ratio(publish.node, 'zod'),
        inboxValibot: ratio(inbox, 'valibot'),
        inboxZod: ratio(inbox, 'zod'),
      },
    });
    console.log(`\nwrote ${file}`);
  } finally {
    await db.close();
  }
}

await main();
