import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { AUDIT_IDS_MAX, auditSelection, SelectionHasher, sameSelection, selectionOf, selectionOfSet } from './selection.js';

const A = '01a2b3c4-0000-7000-8000-00000000000a';
const B = '01a2b3c4-0000-7000-8000-00000000000b';
const C = '01a2b3c4-0000-7000-8000-00000000000c';

test('selection - the digest is sha256 over the ordered ids, one per line: order, membership and count all count', () => {
  assert.equal(selectionOf([A, B]).digest, createHash('sha256').update(`${A}\n${B}\n`).digest('hex'));
  assert.equal(selectionOf([A.toUpperCase(), B]).digest, selectionOf([A, B]).digest, 'case does not');
  assert.notEqual(selectionOf([A, B]).digest, selectionOf([B, A]).digest);
  assert.notEqual(selectionOf([A, B]).digest, selectionOf([C, B]).digest, 'A, B is not C, B');
  assert.equal(selectionOf([]).rows, 0);
  const h = new SelectionHasher();
  for (const id of [A, C, B]) h.add(id);
  assert.deepEqual(h.selection(), selectionOf([A, C, B]), 'hashed as read is hashed at once');
  assert.deepEqual(selectionOfSet([C, A, B]), selectionOf([A, B, C]), 'ids without an order of their own are sorted');
  assert.ok(sameSelection({ digest: selectionOf([A, B]).digest }, selectionOf([A, B])));
  assert.ok(!sameSelection({ digest: selectionOf([A, B]).digest, rows: 3 }, selectionOf([A, B])));
});

test('selection - the audit names every id up to AUDIT_IDS_MAX, past it the first and last', () => {
  assert.deepEqual(auditSelection([A, B]), { ...selectionOf([A, B]), ids: [A, B] });
  const many = Array.from({ length: AUDIT_IDS_MAX + 1 }, (_, i) => `01a2b3c4-0000-7000-8000-${i.toString(16).padStart(12, '0')}`);
  const big = auditSelection(many);
  assert.equal(big.ids, undefined);
  assert.deepEqual([big.rows, big.first, big.last, big.idsOmitted], [many.length, many[0], many.at(-1), many.length]);
  assert.equal(big.digest, selectionOf(many).digest);
});
