import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { createTestStream, natsUrl, type TestStream, uniqueName } from '@ferry/testkit';
import { AckPolicy, StorageType } from '@nats-io/jetstream';
import { ferry } from './ops-helpers.js';

// ferry streams ensure / rm / ls (issue 44): a missing subject is fixed with Ferry's own commands, the
// nats CLI stays optional. Every stream here is this file's own (a unique name), deleted at the end.

let admin: TestStream;
const made: string[] = [];
const nats = () => ['--nats-url', natsUrl()];

function fresh(prefix: string): { name: string; subject: string } {
  const name = uniqueName(prefix).toUpperCase();
  made.push(name);
  return { name, subject: name.toLowerCase() };
}

async function subjectsOf(name: string): Promise<string[] | undefined> {
  try {
    return (await admin.jsm.streams.info(name)).config.subjects ?? [];
  } catch {
    return undefined;
  }
}

before(async () => {
  admin = await createTestStream({ prefix: 'streamscli' });
});

after(async () => {
  for (const name of made) await admin.jsm.streams.delete(name).catch(() => {});
  await admin.close();
});

test('ferry streams ensure - creates a missing stream with file storage and a window covering the retry span; a second run changes nothing', async () => {
  const { name, subject } = fresh('ENS');
  const dry = await ferry(['streams', 'ensure', `${name}=${subject}.>`, '--dry-run', ...nats()]);
  assert.equal(dry.code, 0, dry.err);
  assert.match(dry.out, new RegExp(`^would create stream ${name} \\(subjects ${subject}\\.>; file storage; duplicate window \\d+m\\)$`));
  assert.equal(await subjectsOf(name), undefined, '--dry-run created nothing');

  const r = await ferry(['streams', 'ensure', `${name}=${subject}.>`, '--json', ...nats()]);
  assert.equal(r.code, 0, r.err);
  const out = r.json<{ dryRun: boolean; streams: Array<{ stream: string; exists: boolean; applied: boolean; add: string[] }> }>();
  assert.deepEqual(
    out.streams.map((s) => ({ stream: s.stream, exists: s.exists, applied: s.applied, add: s.add })),
    [{ stream: name, exists: false, applied: true, add: [`${subject}.>`] }],
  );
  const info = await admin.jsm.streams.info(name);
  assert.equal(info.config.storage, StorageType.File);
  // The relay's retry span at its defaults is about 22 minutes: a re-send inside it must be dropped.
  assert.ok(info.config.duplicate_window / 60e9 >= 20, `window ${info.config.duplicate_window / 60e9} min covers the retry span`);

  const again = await ferry(['streams', 'ensure', `${name}=${subject}.>`, ...nats()]);
  assert.equal(again.code, 0, again.err);
  assert.equal(again.out, `stream ${name} needs no change: it already binds ${subject}.>`);
  assert.equal((await admin.jsm.streams.info(name)).config.subjects?.length, 1);
});

test('ferry streams ensure - adds only the subjects an existing stream lacks, never removes one, and previews exactly that', async () => {
  const { name, subject } = fresh('ADD');
  await admin.jsm.streams.add({ name, subjects: [`${subject}.a.>`, `${subject}.keep`], storage: StorageType.Memory });
  const spec = `${name}=${subject}.a.x,${subject}.b.>`; // a.x is covered by a.> already
  const dry = await ferry(['streams', 'ensure', spec, '--dry-run', ...nats()]);
  assert.equal(dry.code, 0, dry.err);
  assert.match(dry.out, new RegExp(`^stream ${name} exists: would add the subject\\(s\\) it lacks \\(${subject}\\.b\\.>\\); none removed`));
  assert.deepEqual(await subjectsOf(name), [`${subject}.a.>`, `${subject}.keep`]);
  const r = await ferry(['streams', 'ensure', spec, ...nats()]);
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, /added the subject\(s\) it lacked/);
  assert.deepEqual(await subjectsOf(name), [`${subject}.a.>`, `${subject}.keep`, `${subject}.b.>`]);
});

test('ferry streams ensure - a subject another stream binds is refused, naming that stream; nothing changes anywhere', async () => {
  const { name, subject } = fresh('OWN');
  const other = fresh('HOLD');
  await admin.jsm.streams.add({ name, subjects: [`${subject}.a`], storage: StorageType.Memory });
  await admin.jsm.streams.add({ name: other.name, subjects: [`${subject}.taken.>`], storage: StorageType.Memory });
  const r = await ferry(['streams', 'ensure', `${name}=${subject}.taken.>,${subject}.free`, ...nats()]);
  assert.equal(r.code, 2, r.out);
  assert.match(
    r.err,
    new RegExp(`stream ${name} exists and refused the subjects it lacks \\(${subject}\\.taken\\.>, ${subject}\\.free\\)`),
  );
  assert.match(r.err, new RegExp(`stream\\(s\\) ${other.name} already bind them`));
  assert.deepEqual(await subjectsOf(name), [`${subject}.a`]);
  assert.deepEqual(await subjectsOf(other.name), [`${subject}.taken.>`]);
});

test('ferry streams ensure - --duplicate-window raises a window and never lowers it; a bare name of a missing stream changes nothing', async () => {
  const { name, subject } = fresh('WIN');
  await admin.jsm.streams.add({ name, subjects: [`${subject}.>`], storage: StorageType.Memory, duplicate_window: 60e9 });
  const up = await ferry(['streams', 'ensure', name, '--duplicate-window', '30m', ...nats()]);
  assert.equal(up.code, 0, up.err);
  assert.match(up.out, /raised its duplicate window from 1m to 30m/);
  assert.equal((await admin.jsm.streams.info(name)).config.duplicate_window, 30 * 60e9);
  const down = await ferry(['streams', 'ensure', name, '--duplicate-window', '2m', ...nats()]);
  assert.equal(down.code, 0, down.err);
  assert.match(down.out, /needs no change/);
  assert.equal((await admin.jsm.streams.info(name)).config.duplicate_window, 30 * 60e9, 'never lowered');

  const missing = fresh('NONE');
  // Both named in one command: the first (missing, bare) fails before the second is touched.
  const r = await ferry(['streams', 'ensure', missing.name, `${name}=${subject}.other`, ...nats()]);
  assert.equal(r.code, 2, r.out);
  assert.match(
    r.err,
    new RegExp(
      `stream ${missing.name} does not exist, and no subjects were given to create it with: give them, e\\.g\\. ${missing.name}=orders\\.>`,
    ),
  );
  assert.equal(await subjectsOf(missing.name), undefined);
  assert.deepEqual(await subjectsOf(name), [`${subject}.>`]);
});

test('ferry streams ensure - hostile input is refused before NATS is asked: reserved subjects, bad names, misplaced wildcards', async () => {
  const cases: Array<[string, RegExp]> = [
    ['X=$JS.API.STREAM.DELETE.VICTIM', /starts with \$JS, which NATS reserves/],
    ['X=_INBOX.>', /starts with _INBOX, which NATS reserves/],
    ['X=$SYS.>', /which NATS reserves/],
    ['BAD.NAME=orders.>', /is not a stream name/],
    ['__proto__ x=orders.>', /is not a stream name/],
    ['X=orders.>.x', /is not a subject/],
    ['X=orders..x', /is not a subject/],
    ['X=ord*ers', /is not a subject/],
    ['X=', /is not a subject/],
  ];
  for (const [spec, message] of cases) {
    // An unreachable server: a refusal here cannot have come from NATS.
    const r = await ferry(['streams', 'ensure', spec, '--nats-url', 'nats://127.0.0.1:1']);
    assert.equal(r.code, 2, `${spec}: ${r.out}`);
    assert.match(r.err, message, spec);
  }
});

test('ferry streams rm - asks first (without a terminal it needs --yes), names what is lost, and deletes; an unknown stream exits 1', async () => {
  const { name, subject } = fresh('RM');
  await admin.jsm.streams.add({ name, subjects: [`${subject}.>`], storage: StorageType.Memory });
  await admin.nc.request(`${subject}.x`, new Uint8Array(1));
  const refused = await ferry(['streams', 'rm', name, ...nats()]);
  assert.equal(refused.code, 2);
  assert.match(
    refused.err,
    new RegExp(`delete stream ${name} \\(1 message, 0 consumers, subjects ${subject}\\.>\\); this cannot be undone: pass --yes`),
  );
  assert.deepEqual(await subjectsOf(name), [`${subject}.>`], 'still there');

  const listed = await ferry(['streams', 'ls', '--json', ...nats()]);
  assert.equal(listed.code, 0, listed.err);
  const row = listed
    .json<{ streams: Array<{ stream: string; subjects: string[]; messages: number }> }>()
    .streams.find((s) => s.stream === name);
  assert.deepEqual(row && { subjects: row.subjects, messages: row.messages }, { subjects: [`${subject}.>`], messages: 1 });

  const r = await ferry(['streams', 'rm', name, '--yes', ...nats()]);
  assert.equal(r.code, 0, r.err);
  assert.equal(r.out, `deleted stream ${name} (1 message, 0 consumers)`);
  assert.equal(await subjectsOf(name), undefined);
  const gone = await ferry(['streams', 'rm', name, '--yes', ...nats()]);
  assert.equal(gone.code, 1);
  assert.match(gone.err, new RegExp(`no stream named ${name}: nothing deleted`));
});

test('ferry streams rm --consumer - deletes one durable consumer after asking, and leaves the stream; an unknown consumer exits 1', async () => {
  const { name, subject } = fresh('RMC');
  await admin.jsm.streams.add({ name, subjects: [`${subject}.>`], storage: StorageType.Memory });
  await admin.jsm.consumers.add(name, { durable_name: 'billing', ack_policy: AckPolicy.Explicit });
  await admin.jsm.consumers.add(name, { durable_name: 'shipping', ack_policy: AckPolicy.Explicit });
  const refused = await ferry(['streams', 'rm', name, '--consumer', 'billing', ...nats()]);
  assert.equal(refused.code, 2);
  assert.match(
    refused.err,
    new RegExp(`delete consumer billing of stream ${name} \\(0 messages not yet delivered, 0 awaiting an ack\\): pass --yes`),
  );
  const r = await ferry(['streams', 'rm', name, '--consumer', 'billing', '--yes', ...nats()]);
  assert.equal(r.code, 0, r.err);
  assert.equal(r.out, `deleted consumer billing of stream ${name}`);
  const left: string[] = [];
  for await (const c of admin.jsm.consumers.list(name)) left.push(c.name);
  assert.deepEqual(left, ['shipping']);
  const gone = await ferry(['streams', 'rm', name, '--consumer', 'billing', '--yes', ...nats()]);
  assert.equal(gone.code, 1);
  assert.match(gone.err, new RegExp(`stream ${name} has no consumer named billing: nothing deleted`));
  const bad = await ferry(['streams', 'rm', name, '--consumer', 'a.b', '--yes', ...nats()]);
  assert.equal(bad.code, 2);
  assert.match(bad.err, /"a\.b" is not a consumer name/);
});

test('ferry streams ensure --replicas - never lowers; on a lone server more than one replica is refused before anything changes', async () => {
  const { name, subject } = fresh('REP');
  await admin.jsm.streams.add({ name, subjects: [`${subject}.>`], storage: StorageType.Memory });
  const same = await ferry(['streams', 'ensure', name, '--replicas', '1', ...nats()]);
  assert.equal(same.code, 0, same.err);
  assert.match(same.out, /needs no change/);
  // The machine's NATS is one server: nats-server 2.9 would take num_replicas 3 in an update and keep one copy.
  const r = await ferry(['streams', 'ensure', name, '--replicas', '3', ...nats()]);
  assert.equal(r.code, 2, r.out);
  assert.match(r.err, /--replicas 3: the NATS server at \S+ is not in a cluster, so it keeps one copy whatever the stream says/);
  assert.equal((await admin.jsm.streams.info(name)).config.num_replicas, 1);
  const dry = await ferry(['streams', 'ensure', name, '--replicas', '3', '--dry-run', ...nats()]);
  assert.equal(dry.code, 2, 'a preview of what cannot be done is refused the same way');
  const zero = await ferry(['streams', 'ensure', name, '--replicas', '0', ...nats()]);
  assert.equal(zero.code, 2);
});
