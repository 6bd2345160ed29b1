import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { DiagnosticSeverity, Parser } from '@asyncapi/parser';
import { main } from '@ferry/relay';
import { contractIn, RULES, type SnapshotFile } from './contracts-rules.js';

// `ferry contracts` (issue 45, points 5 and 6): snapshots from zod, valibot and arktype registries,
// the BACKWARD check with one refusal per rule, AsyncAPI checked by the official parser, and the bad
// inputs (a registry that does not load, hostile names).

const FIXTURES = fileURLToPath(new URL('../fixtures/contracts/', import.meta.url));
const fixture = (name: string) => join(FIXTURES, name);
let dir = '';

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'ferry-contracts-cli-'));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function ferry(...args: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(['node', 'ferry', ...args], { out: (l) => out.push(l), err: (l) => err.push(l), env: {} });
  return { code, out: out.join('\n'), err: err.join('\n') };
}

async function snapshotOf(registry: string): Promise<SnapshotFile> {
  const r = await ferry('contracts', 'snapshot', '--registry', registry);
  assert.equal(r.code, 0, r.err);
  return JSON.parse(r.out) as SnapshotFile;
}

let files = 0;
async function write(name: string, text: string): Promise<string> {
  const path = join(dir, `${files++}-${name}`);
  await writeFile(path, text);
  return path;
}

test('contracts snapshot - zod, valibot (its jsonSchema) and arktype registries give sorted, repeatable JSON Schema snapshots', async () => {
  const zod = await snapshotOf(fixture('zod.mjs'));
  assert.equal(zod.format, 'ferry.contracts.snapshot/1');
  assert.deepEqual(
    zod.contracts.map((c) => `${c.type} v${c.version} ${c.subject} ${c.dataschema}`),
    [
      'OrderPlaced v1 shop.orders.placed ferry:OrderPlaced/v1',
      'OrderPlaced v2 shop.orders.placed ferry:OrderPlaced/v2',
      'OrderShipped v1 null ferry:OrderShipped/v1',
    ],
  );
  const v2 = contractIn(zod, 'OrderPlaced', 2).jsonSchema;
  assert.deepEqual(v2.properties.total.properties.currency.enum, ['EUR', 'USD']);
  assert.equal(v2.properties.total.additionalProperties, false);
  assert.deepEqual(Object.keys(v2.properties), [...Object.keys(v2.properties)].sort(), 'keys sorted');

  const valibot = await snapshotOf(fixture('valibot.mjs'));
  assert.deepEqual(contractIn(valibot, 'OrderPlaced', 1).jsonSchema.properties.orderId, { format: 'uuid', type: 'string' });
  const arktype = await snapshotOf(fixture('arktype.mjs'));
  const ark = contractIn(arktype, 'OrderPlaced', 1).jsonSchema;
  assert.deepEqual(
    [ark.properties.status.enum, ark.required],
    [
      ['open', 'paid'],
      ['orderId', 'status', 'total'],
    ],
  );

  const out = join(dir, 'zod.snapshot.json');
  const r = await ferry('contracts', 'snapshot', '--registry', fixture('zod.mjs'), '--out', out);
  assert.deepEqual([r.code, r.out, r.err], [0, '', `wrote the contracts snapshot to ${out}`]);
  const again = await ferry('contracts', 'snapshot', '--registry', fixture('zod.mjs'));
  assert.equal(await readFile(out, 'utf8'), `${again.out}\n`, 'the same registry gives the same bytes');
});

test('contracts snapshot - a validator with no JSON Schema export is refused, naming the contract and the fix', async () => {
  const r = await ferry('contracts', 'snapshot', '--registry', fixture('no-json-schema.mjs'));
  assert.equal(r.code, 1);
  assert.equal(r.out, '');
  assert.match(r.err, /^ferry: "OrderPlaced" v1: its validator \(valibot\) exports no JSON Schema/);
  assert.match(
    r.err,
    /give defineEvent\(\{ type: "OrderPlaced", version: 1, … \}\) a jsonSchema, e\.g\. jsonSchema: toJsonSchema\(schema\) from @valibot\/to-json-schema/,
  );
});

test('contracts check - an unchanged registry matches; a compatible change passes and says the snapshot is behind', async () => {
  const against = join(dir, 'check.snapshot.json');
  assert.equal((await ferry('contracts', 'snapshot', '--registry', fixture('zod.mjs'), '--out', against)).code, 0);
  const same = await ferry('contracts', 'check', '--registry', fixture('zod.mjs'), '--against', against);
  assert.deepEqual([same.code, same.out], [0, `ferry contracts check: every contract matches ${against}`]);

  const compatible = await ferry('contracts', 'check', '--registry', fixture('zod-compatible.mjs'), '--against', against);
  assert.equal(compatible.code, 0, compatible.err);
  assert.equal(
    compatible.out,
    [
      `ferry contracts check: compatible with ${against} (new: OrderCancelled v1, OrderShipped v2; changed compatibly: OrderPlaced v2)`,
      `the snapshot is behind the registry: once these versions are published, refresh it with ferry contracts snapshot --registry ${fixture('zod-compatible.mjs')} --out ${against}`,
    ].join('\n'),
  );
  const json = await ferry('contracts', 'check', '--registry', fixture('zod-compatible.mjs'), '--against', against, '--json');
  const parsed = JSON.parse(json.out);
  assert.deepEqual([json.code, parsed.ok, parsed.behind, parsed.breaking], [0, true, true, []]);
});

test('contracts check - a field removed from a published version is refused, naming type, version, field, rule and fix', async () => {
  const against = join(dir, 'broken.snapshot.json');
  assert.equal((await ferry('contracts', 'snapshot', '--registry', fixture('zod.mjs'), '--out', against)).code, 0);
  const r = await ferry('contracts', 'check', '--registry', fixture('zod-broken.mjs'), '--against', against);
  assert.equal(r.code, 1);
  assert.equal(
    r.err,
    [
      `ferry contracts check: 1 breaking change against ${against}`,
      '(BACKWARD rule: data valid under the snapshot must stay valid, and keep its meaning, under the registry)',
      '  OrderPlaced v2, field total.currency, rule field-removed: the snapshot has required field "currency", the registry does not',
      `    fix: keep "OrderPlaced" v2 as the snapshot has it and publish the new shape as v3, with upcast: (v2Data) => v3Data on v2; if "OrderPlaced" v2 was never published, refresh the snapshot instead: ferry contracts snapshot --registry ${fixture('zod-broken.mjs')} --out ${against}`,
    ].join('\n'),
  );
});

test('contracts check - each BACKWARD rule refuses its change with the type, version, field, rule and fix', async () => {
  const base = JSON.stringify(await snapshotOf(fixture('zod.mjs')));
  for (const c of RULES) {
    const snap = JSON.parse(base) as SnapshotFile;
    c.edit(snap);
    const against = await write(`${c.rule}.json`, JSON.stringify(snap));
    const r = await ferry('contracts', 'check', '--registry', fixture('zod.mjs'), '--against', against);
    const label = `${c.rule} at ${c.path}`;
    assert.equal(r.code, 1, `${label}: ${r.out}`);
    const head = `  ${c.type ?? 'OrderPlaced'} v${c.version ?? 2}${c.path ? `, field ${c.path}` : ''}, rule ${c.rule}`;
    const line = r.err.split('\n').find((l) => l.startsWith(head));
    assert.ok(line, `${label}: no line starts ${JSON.stringify(head)} in\n${r.err}`);
    assert.match(line, c.detail, label);
    assert.match(r.err, /\n {4}fix: (keep|put) "(OrderPlaced|OrderShipped)" v\d/, label);
    assert.match(r.err, /refresh the snapshot instead: ferry contracts snapshot --registry /, label);
    const json = JSON.parse((await ferry('contracts', 'check', '--registry', fixture('zod.mjs'), '--against', against, '--json')).out);
    assert.equal(json.ok, false, label);
    assert.ok(
      json.breaking.some((f: { rule: string; path: string }) => f.rule === c.rule && f.path === c.path),
      `${label}: ${JSON.stringify(json.breaking)}`,
    );
  }
});

test('contracts - __proto__ and constructor as type and field names survive snapshot and check; no prototype is touched', async () => {
  const snap = await snapshotOf(fixture('hostile.mjs'));
  assert.deepEqual(
    snap.contracts.map((c) => c.type),
    ['__proto__', 'constructor'],
  );
  const proto = contractIn(snap, '__proto__', 1).jsonSchema;
  assert.ok(Object.hasOwn(proto.properties, '__proto__'));
  assert.deepEqual(Object.getOwnPropertyDescriptor(proto.properties, '__proto__')?.value, { type: 'string' });
  assert.deepEqual(proto.required, ['__proto__', 'constructor']);
  const against = await write('hostile.json', JSON.stringify(snap));
  assert.equal((await ferry('contracts', 'check', '--registry', fixture('hostile.mjs'), '--against', against)).code, 0);

  // A snapshot whose __proto__ field had another type, and JSON that tries to set prototypes.
  const edited = JSON.parse(
    JSON.stringify(snap).replace('"__proto__":{"type":"string"}', '"__proto__":{"type":"number","__proto__":{"polluted":1}}'),
  );
  const text = JSON.stringify(edited).replace('"format":', '"__proto__":{"polluted":2},"format":');
  const r = await ferry('contracts', 'check', '--registry', fixture('hostile.mjs'), '--against', await write('hostile-edit.json', text));
  assert.equal(r.code, 1);
  assert.match(r.err, /\n {2}__proto__ v1, field __proto__, rule type-changed: was number, now string\n/);
  const doc = await ferry('contracts', 'asyncapi', '--registry', fixture('hostile.mjs'));
  assert.equal(doc.code, 0, doc.err);
  assert.ok(Object.hasOwn(JSON.parse(doc.out).components.messages, '__proto__.v1'));
  assert.equal(({} as Record<string, unknown>).polluted, undefined);
  assert.equal(Object.getPrototypeOf({}), Object.prototype);
});

test('contracts - a registry module that is missing, does not load or exports no registry exits 2 naming the file', async () => {
  const expected = 'expected a module whose default export is a registry: export default defineContracts([...])';
  const cases: Array<[string, RegExp]> = [
    [join(dir, 'missing.mjs'), /: no such file \(/],
    [await write('syntax.mjs', 'export default defineContracts([;\n'), /: it did not load: SyntaxError: /],
    [await write('throws.mjs', "throw new Error('no registry today');\n"), /: it did not load: Error: no registry today/],
    [await write('nothing.mjs', 'export const answer = 42;\n'), /: it exports no registry \(its exports: answer\)/],
    [fixture('gap.mjs'), /: it did not load: ValidationError: "OrderPlaced" has versions 2: version 1 is missing/],
    [dir, / is not a file/],
  ];
  const two = await write(
    'two.mjs',
    `export { contracts as a } from ${JSON.stringify(fixture('zod-compatible.mjs'))};\nexport { registry as b } from ${JSON.stringify(fixture('zod-broken.mjs'))};\n`,
  );
  cases.push([two, /: it exports 2 registries \(a, b\) and none as default or as "contracts"/]);
  for (const [file, why] of cases) {
    for (const sub of ['snapshot', 'asyncapi']) {
      const r = await ferry('contracts', sub, '--registry', file);
      assert.equal(r.code, 2, `${sub} ${file}: ${r.err}`);
      assert.ok(r.err.startsWith(`ferry: --registry ${JSON.stringify(file)}`), r.err);
      assert.match(r.err, why);
      assert.ok(r.err.endsWith(expected), r.err);
    }
  }
  // The one export that is a registry is taken, whatever its name.
  const one = await write('one.mjs', `export { registry as orders } from ${JSON.stringify(fixture('zod-broken.mjs'))};\n`);
  assert.equal((await ferry('contracts', 'snapshot', '--registry', one)).code, 0);
});

test('contracts check - an --against file that is missing or is not a snapshot exits 2 naming it', async () => {
  const cases: Array<[string, RegExp]> = [
    [join(dir, 'none.json'), /no such file; write it first: ferry contracts snapshot --registry /],
    [await write('bad.json', '{ nope'), /not JSON/],
    [await write('other.json', '{"format":"something else","contracts":[]}'), /no "format": "ferry\.contracts\.snapshot\/1"/],
    [
      await write('noschema.json', '{"format":"ferry.contracts.snapshot/1","contracts":[{"type":"T","version":1,"dataschema":"x"}]}'),
      /contracts\[0\]\.jsonSchema/,
    ],
  ];
  for (const [file, why] of cases) {
    const r = await ferry('contracts', 'check', '--registry', fixture('zod.mjs'), '--against', file);
    assert.equal(r.code, 2, r.err);
    assert.ok(r.err.startsWith(`ferry: --against ${JSON.stringify(file)}: `), r.err);
    assert.match(r.err, why);
  }
  assert.equal((await ferry('contracts', 'check', '--registry', fixture('zod.mjs'))).code, 2, '--against is required');
});

test('contracts asyncapi - an AsyncAPI 3.0 document the official parser validates: channels are subjects, every version a message', async () => {
  const out = join(dir, 'asyncapi.json');
  const r = await ferry(
    'contracts',
    'asyncapi',
    '--registry',
    fixture('zod-compatible.mjs'),
    '--out',
    out,
    '--title',
    'Shop events',
    '--api-version',
    '2.1.0',
  );
  assert.equal(r.code, 0, r.err);
  const text = await readFile(out, 'utf8');
  const { document, diagnostics } = await new Parser().parse(text);
  const errors = diagnostics.filter((d) => d.severity === DiagnosticSeverity.Error);
  assert.deepEqual(
    errors.map((d) => `${d.code} ${d.message} ${JSON.stringify(d.path)}`),
    [],
  );
  assert.ok(document);
  assert.equal(document.version(), '3.0.0');
  assert.deepEqual([document.info().title(), document.info().version()], ['Shop events', '2.1.0']);
  assert.deepEqual(
    document
      .channels()
      .all()
      .map((c) => c.address())
      .sort(),
    [null, 'shop.orders.cancelled', 'shop.orders.placed'].sort(),
  );
  assert.deepEqual(
    document
      .messages()
      .all()
      .map((m) => m.name())
      .sort(),
    ['OrderCancelled.v1', 'OrderPlaced.v1', 'OrderPlaced.v2', 'OrderShipped.v1', 'OrderShipped.v2'],
  );
  assert.equal(document.operations().all().length, 3);
  assert.ok(
    document
      .operations()
      .all()
      .every((o) => o.action() === 'send'),
  );

  const raw = JSON.parse(text);
  const v2 = raw.components.messages['OrderPlaced.v2'];
  assert.deepEqual(
    [v2.headers.properties['ce-type'].const, v2.headers.properties['ce-dataschema'].const, v2.headers.properties['ce-dataversion'].const],
    ['OrderPlaced', 'ferry:OrderPlaced/v2', '2'],
  );
  assert.ok(v2.headers.required.includes('ce-partitionkey'));
  assert.equal(v2['x-ferry-partition-key'], 'ce-partitionkey');
  assert.deepEqual(raw.components.schemas['OrderPlaced.v2'].properties.total.properties.currency.enum, ['EUR', 'USD', 'GBP']);
  assert.deepEqual(Object.keys(raw.channels['shop.orders.placed'].messages), ['OrderPlaced.v1', 'OrderPlaced.v2']);
});

test('contracts - each subcommand has --help with an example; ferry contracts alone prints its help', async () => {
  for (const sub of ['snapshot', 'check', 'asyncapi']) {
    const r = await ferry('contracts', sub, '--help');
    assert.equal(r.code, 0);
    assert.match(r.out, new RegExp(`Usage: ferry contracts ${sub} \\[options\\]`));
    assert.match(r.out, new RegExp(`Examples:\\n {2}ferry contracts ${sub} --registry `));
  }
  assert.equal((await ferry('contracts')).code, 2);
  assert.equal((await ferry('contracts', 'snapshot')).code, 2, '--registry is required');
});
