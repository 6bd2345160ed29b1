import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { isValidationError, isVersionOrderError, quoteIdentifier, withTransaction } from '@ferry/core';
import { createTestDatabase, type TestDatabase } from '@ferry/testkit';
import { createPublisher, type PublishInput } from './index.js';

// Unusual callers (issue 14): explicit versions out of order, times PostgreSQL cannot
// store, byte types other than Uint8Array, no transaction, ids published again after prune.

let db: TestDatabase;
let s: string;
before(async () => {
  db = await createTestDatabase({ prefix: 'pub_edges', max: 10 });
  s = quoteIdentifier(db.schema);
});
after(() => db.close());

const ev = (key: string, extra: Partial<PublishInput> = {}): PublishInput =>
  ({ subject: 'orders.placed', key, type: 'OrderPlaced', data: { key }, ...extra }) as PublishInput;

async function versions(key: string): Promise<number[]> {
  const r = await db.pool.query<{ v: number }>(`SELECT version::int AS v FROM ${s}.outbox o WHERE key = $1 ORDER BY o.seq`, [key]);
  return r.rows.map((x) => x.v);
}

describe('publisher - explicit versions', () => {
  test('publisher - an explicit version not above the recorded one is refused with VersionOrderError and the transaction stays usable', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    await withTransaction(db.pool, (tx) => publisher.publish(tx, ev('vo-1', { version: 1 })));
    await withTransaction(db.pool, (tx) => publisher.publish(tx, ev('vo-1', { version: 5 })));
    for (const v of [3, 5]) {
      const after = await withTransaction(db.pool, async (tx) => {
        const err = await publisher.publish(tx, ev('vo-1', { version: v })).catch((e: unknown) => e);
        assert.ok(isVersionOrderError(err), `v${v}: ${String(err)}`);
        assert.equal(err.recorded, 5n);
        assert.equal(err.version, BigInt(v));
        assert.match(err.message, /already had version 5/);
        // Not aborted: the caller can go on in the same transaction.
        return (await tx.query<{ one: number }>('SELECT 1 AS one')).rows[0]?.one;
      });
      assert.equal(after, 1);
    }
    assert.deepEqual(await versions('vo-1'), [1, 5]);
    // Retrying an accepted publish with its version is still idempotent.
    const id = randomUUID();
    await withTransaction(db.pool, (tx) => publisher.publish(tx, ev('vo-1', { id, version: 6 })));
    const again = await withTransaction(db.pool, (tx) => publisher.publish(tx, ev('vo-1', { id, version: 6 })));
    assert.equal(again.existing, true);
  });

  test('publisher - a pruned version cannot be stored again', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    await withTransaction(db.pool, (tx) => publisher.publish(tx, ev('vo-pruned', { version: 1 })));
    await db.pool.query(`DELETE FROM ${s}.outbox WHERE key = 'vo-pruned'`);
    await assert.rejects(
      withTransaction(db.pool, (tx) => publisher.publish(tx, ev('vo-pruned', { version: 1 }))),
      isVersionOrderError,
    );
    assert.deepEqual(await versions('vo-pruned'), []);
  });

  test('publisher - publishMany refuses [v9, v8] before any SQL, and a batch with one stale version writes nothing', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    await assert.rejects(
      withTransaction(db.pool, (tx) => publisher.publishMany(tx, [ev('vo-b', { version: 9 }), ev('vo-b', { version: 8 })])),
      (err: unknown) => isValidationError(err) && err.field === 'events[1].version',
    );
    assert.deepEqual(await versions('vo-b'), []);
    await withTransaction(db.pool, (tx) => publisher.publish(tx, ev('vo-b', { version: 5 })));
    await assert.rejects(
      withTransaction(db.pool, (tx) =>
        publisher.publishMany(tx, [ev('vo-c', { version: 1 }), ev('vo-b', { version: 4 }), ev('vo-d'), ev('vo-b', { version: 7 })]),
      ),
      (err: unknown) => isVersionOrderError(err) && err.key === 'vo-b' && err.recorded === 5n,
    );
    assert.deepEqual(await versions('vo-c'), [], 'nothing of the batch was written');
    assert.deepEqual(await versions('vo-d'), []);
    assert.deepEqual(await versions('vo-b'), [5]);
    await withTransaction(db.pool, (tx) => publisher.publishMany(tx, [ev('vo-b', { version: 6 }), ev('vo-b', { version: 8 })]));
    assert.deepEqual(await versions('vo-b'), [5, 6, 8]);
  });

  test('publisher - a lower version waiting on a concurrent publisher of its key is compared with that one once it commits', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    const first = await db.pool.connect();
    try {
      await first.query('BEGIN');
      await publisher.publish(first, ev('vo-race', { version: 5 }));
      const second = withTransaction(db.pool, (tx) => publisher.publish(tx, ev('vo-race', { version: 3 })));
      await new Promise((r) => setTimeout(r, 200));
      await first.query('COMMIT');
      await assert.rejects(second, isVersionOrderError);
    } finally {
      first.release();
    }
    assert.deepEqual(await versions('vo-race'), [5]);
  });
});

describe('publisher - event time', () => {
  test('publisher - a time outside the years 1 to 9999 is a ValidationError before any SQL; the transaction stays usable', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    const year = (y: number, last = false) => {
      const d = new Date(0);
      d.setUTCFullYear(y, last ? 11 : 0, last ? 31 : 1);
      if (last) d.setUTCHours(23, 59, 59, 999);
      return d;
    };
    for (const time of [year(0), year(-1), year(10000), new Date(year(1).getTime() - 1)]) {
      const ok = await withTransaction(db.pool, async (tx) => {
        await assert.rejects(
          publisher.publish(tx, ev('t-range', { time })),
          (err: unknown) => isValidationError(err) && err.field === 'event.time' && /0001 to 9999/.test(err.message),
          time.toISOString(),
        );
        return (await tx.query<{ one: number }>('SELECT 1 AS one')).rows[0]?.one;
      });
      assert.equal(ok, 1, `${time.toISOString()}: the transaction was not aborted`);
    }
    // The edges themselves are stored and read back unchanged.
    for (const time of [year(1), year(9999, true)]) {
      await withTransaction(db.pool, (tx) => publisher.publish(tx, ev('t-range', { time })));
    }
    const { rows } = await db.pool.query<{ t: Date }>(`SELECT occurred_at AS t FROM ${s}.outbox o WHERE key = 't-range' ORDER BY o.seq`);
    assert.deepEqual(
      rows.map((r) => r.t.toISOString()),
      ['0001-01-01T00:00:00.000Z', '9999-12-31T23:59:59.999Z'],
    );
  });
});

describe('publisher - data', () => {
  async function stored(id: string): Promise<{ hex: string; contentType: string }> {
    const { rows } = await db.pool.query<{ hex: string; ct: string }>(
      `SELECT encode(data, 'hex') AS hex, content_type AS ct FROM ${s}.outbox WHERE id = $1`,
      [id],
    );
    return { hex: rows[0]?.hex ?? '', contentType: rows[0]?.ct ?? '' };
  }

  test('publisher - ArrayBuffer, DataView and typed arrays other than Uint8Array are stored as their bytes', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    const backing = new Uint8Array([9, 1, 2, 3, 9]).buffer;
    const cases: Array<[string, unknown, string]> = [
      ['ArrayBuffer', new Uint8Array([1, 2, 3]).buffer, '010203'],
      ['DataView (a window of its buffer)', new DataView(backing, 1, 3), '010203'],
      ['Uint16Array', new Uint16Array([1, 2]), '01000200'],
      ['Buffer', Buffer.from([0xff, 0]), 'ff00'],
      ['Uint8Array window', new Uint8Array(backing, 1, 2), '0102'],
    ];
    for (const [what, data, hex] of cases) {
      const r = await withTransaction(db.pool, (tx) =>
        publisher.publish(tx, ev('bytes', { data, contentType: 'application/octet-stream' } as Partial<PublishInput>)),
      );
      assert.deepEqual(await stored(r.id), { hex, contentType: 'application/octet-stream' }, what);
    }
    await assert.rejects(
      withTransaction(db.pool, (tx) => publisher.publish(tx, ev('bytes', { data: new DataView(backing) }))),
      (err: unknown) => isValidationError(err) && err.field === 'event.contentType',
      'bytes need a contentType',
    );
  });

  test('publisher - a value JSON would silently mangle is a ValidationError naming where it is', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    class Hidden {
      #secret = 1;
      get secret() {
        return this.#secret;
      }
    }
    const cases: Array<[unknown, string]> = [
      [new Map([['a', 1]]), 'event.data'],
      [{ tags: new Set(['x']) }, 'event.data.tags'],
      [{ nested: { at: [1, new Map()] } }, 'event.data.nested.at.1'],
      [{ n: Number.NaN }, 'event.data.n'],
      [{ n: Number.POSITIVE_INFINITY }, 'event.data.n'],
      [{ re: /x/ }, 'event.data.re'],
      [{ err: new Error('boom') }, 'event.data.err'],
      [{ fn: () => 1 }, 'event.data.fn'],
      [{ raw: new Uint16Array([1]) }, 'event.data.raw'],
      [{ h: new Hidden() }, 'event.data.h'],
    ];
    for (const [data, field] of cases) {
      await withTransaction(db.pool, async (tx) => {
        await assert.rejects(
          publisher.publish(tx, ev('json', { data } as Partial<PublishInput>)),
          (err: unknown) => isValidationError(err) && err.field === field && /JSON would not keep/.test(err.message),
          field,
        );
      });
    }
    assert.deepEqual(await versions('json'), []);
  });

  test('publisher - a Date subclass cannot change the stored time or slip past the size check', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'svc', maxPayloadBytes: 2048 });
    const at = Date.UTC(2026, 0, 2, 3, 4, 5);
    class Lying extends Date {
      override toISOString() {
        return 'x'.repeat(5000);
      }
      override getTime() {
        return 0;
      }
    }
    const r = await withTransaction(db.pool, (tx) => publisher.publish(tx, ev('lying-date', { time: new Lying(at) })));
    const { rows } = await db.pool.query<{ t: Date }>(`SELECT occurred_at AS t FROM ${s}.outbox WHERE id = $1`, [r.id]);
    assert.equal(rows[0]?.t.getTime(), at);
    const fake = Object.create(Date.prototype) as Date;
    await withTransaction(db.pool, async (tx) => {
      await assert.rejects(
        publisher.publish(tx, ev('lying-date', { time: fake })),
        (err: unknown) => isValidationError(err) && err.field === 'event.time',
      );
    });
  });

  test('publisher - ordinary JSON data is unchanged: Dates, class instances with fields, undefined fields', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    class Order {
      constructor(
        readonly id: string,
        readonly total: number,
      ) {}
    }
    const data = { at: new Date('2026-01-02T03:04:05.000Z'), order: new Order('o1', 5), skip: undefined, list: [1, 'two', null] };
    const r = await withTransaction(db.pool, (tx) => publisher.publish(tx, ev('json-ok', { data } as Partial<PublishInput>)));
    const { hex, contentType } = await stored(r.id);
    assert.equal(contentType, 'application/json');
    assert.deepEqual(JSON.parse(Buffer.from(hex, 'hex').toString('utf8')), {
      at: '2026-01-02T03:04:05.000Z',
      order: { id: 'o1', total: 5 },
      list: [1, 'two', null],
    });
  });
});

describe('publisher - transactions', () => {
  test('publisher - a pg.Pool is refused before any SQL', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    for (const call of [() => publisher.publish(db.pool, ev('tx-pool')), () => publisher.publishMany(db.pool, [ev('tx-pool')])]) {
      await assert.rejects(call(), (err: unknown) => isValidationError(err) && err.field === 'tx' && /connection pool/.test(err.message));
    }
    assert.deepEqual(await versions('tx-pool'), []);
  });

  test('publisher - a client with no BEGIN is refused before any SQL; inside BEGIN it publishes', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    const client = await db.pool.connect();
    try {
      await client.query('SELECT 1');
      await assert.rejects(
        publisher.publish(client, ev('tx-none')),
        (err: unknown) => isValidationError(err) && /not inside a transaction/.test(err.message),
      );
      assert.deepEqual(await versions('tx-none'), []);
      await client.query('BEGIN');
      await publisher.publish(client, ev('tx-none'));
      await client.query('ROLLBACK');
      assert.deepEqual(await versions('tx-none'), [], 'rolled back with the transaction');
      // A BEGIN still in flight (not awaited) is not mistaken for no transaction.
      const begun = client.query('BEGIN');
      const r = await publisher.publish(client, ev('tx-none'));
      await begun;
      await client.query('COMMIT');
      assert.equal(r.version, 1n);
      assert.deepEqual(await versions('tx-none'), [1]);
    } finally {
      client.release();
    }
  });

  test('publisher - a publish that ran outside a transaction behind a statement in flight is reported, not silent', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    const client = await db.pool.connect();
    try {
      const inFlight = client.query('SELECT pg_sleep(0.05)');
      await assert.rejects(
        publisher.publish(client, ev('tx-late')),
        (err: unknown) => isValidationError(err) && /already committed on its own/.test(err.message),
      );
      await inFlight;
    } finally {
      client.release();
    }
  });
});

describe('publisher - hostile names on the short path (generated id, next version)', () => {
  test('publisher - a type, key and header names from Object.prototype are stored as given; ce-* and Nats-Msg-Id headers are refused before any SQL and other keys go on', async () => {
    const publisher = createPublisher({ schema: db.schema, source: 'svc' });
    const headers = JSON.parse('{"__proto__": "p", "constructor": "c", "toString": "t"}') as Record<string, string>;
    assert.ok(Object.hasOwn(headers, '__proto__'));
    const [stored] = await withTransaction(db.pool, (tx) =>
      publisher.publishMany(tx, [ev('__proto__', { type: 'constructor', headers }), ev('constructor', { type: '__proto__' })]),
    );
    assert.equal(stored?.version, 1n);
    const { rows } = await db.pool.query<{ key: string; type: string; headers: Record<string, string> }>(
      `SELECT key, type, headers FROM ${s}.outbox WHERE key IN ('__proto__', 'constructor') ORDER BY seq`,
    );
    assert.deepEqual(
      rows.map((r) => [r.key, r.type, Object.keys(r.headers).sort()]),
      [
        ['__proto__', 'constructor', ['__proto__', 'constructor', 'toString']],
        ['constructor', '__proto__', []],
      ],
    );
    for (const name of ['ce-id', 'CE-TYPE', 'Nats-Msg-Id', 'content-type']) {
      const err = await withTransaction(db.pool, (tx) => publisher.publish(tx, ev('hostile-h', { headers: { [name]: 'forged' } }))).catch(
        (e: unknown) => e,
      );
      assert.ok(isValidationError(err), `${name}: ${String(err)}`);
      assert.equal(err.field, `event.headers.${name}`);
    }
    assert.deepEqual(await versions('hostile-h'), []);
    // The key next to them is not held back.
    await withTransaction(db.pool, (tx) => publisher.publish(tx, ev('hostile-next')));
    assert.deepEqual(await versions('hostile-next'), [1]);
  });
});
