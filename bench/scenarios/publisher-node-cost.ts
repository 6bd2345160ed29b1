/**
 * The publisher's own Node.js work per event, with the database taken out: a
 * stand-in connection that answers each publish statement at once with the
 * rows PostgreSQL would return. What remains is validation, id generation,
 * data serialisation, the size check and building the statement's values
 * (node-postgres's own serialisation and the round trip are not counted).
 * Rounds alternate publish and publishMany(100); the first round warms up.
 *
 *   node bench/dist/scenarios/publisher-node-cost.js [--rounds 5] [--events 100000]
 */
import { createPublisher } from '@ferry/publisher';
import { benchFlags } from '../lib/args.js';
import { publishStandIn } from '../lib/stand-in.js';
import { printMedians, writeResult } from '../lib/stats.js';

const flags = benchFlags(
  "The publisher's own Node.js CPU per event (validation, ids, JSON, size check, values) on a stand-in connection, without PostgreSQL (not part of npm run bench).",
  {
    rounds: ['<n> measured rounds after one warm-up round', 5],
    events: ['<n> events per round and call kind', 100_000],
  },
);

const payload = (i: number) => ({ orderId: `order-${i}`, total: 4999, currency: 'EUR', lines: [{ sku: 'sku-1', qty: 2 }] });
const event = (i: number) => ({ subject: 'orders.placed', key: `order-${i % 5000}`, type: 'OrderPlaced', data: payload(i) });

async function main() {
  const publisher = createPublisher({ schema: 'bench', source: 'bench' });
  const tx = publishStandIn();
  const samples: Record<'publish' | 'publishMany100', number[]> = { publish: [], publishMany100: [] };
  for (let round = 0; round <= flags.rounds; round++) {
    let started = performance.now();
    for (let i = 0; i < flags.events; i++) await publisher.publish(tx, event(i));
    const one = ((performance.now() - started) / flags.events) * 1000;
    started = performance.now();
    for (let i = 0; i < flags.events; i += 100)
      await publisher.publishMany(
        tx,
        Array.from({ length: 100 }, (_, j) => event(i + j)),
      );
    const many = ((performance.now() - started) / flags.events) * 1000;
    if (round > 0) {
      samples.publish.push(one);
      samples.publishMany100.push(many);
    }
  }
  const results = printMedians(
    `Publisher Node.js work per event, stand-in connection (median of ${flags.rounds} rounds of ${flags.events} events)`,
    ['call', 'µs per event (median)'],
    samples,
  );
  const file = writeResult('publisher-node-cost', { scenario: 'publisher-node-cost', ...flags, usPerEvent: results });
  console.log(`\nwrote ${file}`);
}

await main();
