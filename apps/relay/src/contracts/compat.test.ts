import assert from 'node:assert/strict';
import { test } from 'node:test';
import { compareSchemas } from './compat.js';
import type { Json } from './json-schema.js';

// The BACKWARD comparison on the shapes zod, valibot and arktype emit: what widens passes, what
// narrows is named, and what cannot be proved is refused, never guessed.

const rules = (oldSchema: Json, newSchema: Json) => compareSchemas(oldSchema, newSchema).map((c) => `${c.path || '(data)'} ${c.rule}`);
const obj = (properties: Record<string, Json>, required: string[] = Object.keys(properties), extra: Record<string, Json> = {}): Json => ({
  type: 'object',
  properties,
  required,
  ...extra,
});

test('compat - widening changes pass: integer to number, nullable, looser bounds, wider enum, optional field, open object', () => {
  const pass: Array<[string, Json, Json]> = [
    ['integer to number', { type: 'integer' }, { type: 'number' }],
    ['string to string or null (type array)', { type: 'string' }, { type: ['string', 'null'] }],
    ['string to anyOf string, null (zod nullable)', { type: 'string' }, { anyOf: [{ type: 'string' }, { type: 'null' }] }],
    ['type array to anyOf', { type: ['string', 'null'] }, { anyOf: [{ type: 'string' }, { type: 'null' }] }],
    ['looser bounds', { type: 'number', minimum: 1, maximum: 10 }, { type: 'number', minimum: 0, exclusiveMaximum: 11 }],
    ['shorter minLength, longer maxLength', { type: 'string', minLength: 3, maxLength: 5 }, { type: 'string', minLength: 1, maxLength: 9 }],
    ['multipleOf of a divisor', { type: 'integer', multipleOf: 10 }, { type: 'integer', multipleOf: 5 }],
    ['wider enum', { enum: ['a', 'b'] }, { type: 'string', enum: ['a', 'b', 'c'] }],
    ['const to an enum holding it', { const: 'a' }, { enum: ['a', 'b'] }],
    ['new optional field', obj({ a: { type: 'string' } }), obj({ a: { type: 'string' }, b: { type: 'number' } }, ['a'])],
    ['required to optional', obj({ a: { type: 'string' } }), obj({ a: { type: 'string' } }, [])],
    ['closed to open', obj({}, [], { additionalProperties: false }), obj({}, [])],
    ['pattern and format removed', { type: 'string', pattern: '^a', format: 'uuid' }, { type: 'string' }],
    ['a description changed', { type: 'string', description: 'x' }, { type: 'string', description: 'y', title: 'Y' }],
    ['an external $ref unchanged (compared as text)', { $ref: 'https://example.com/a.json' }, { $ref: 'https://example.com/a.json' }],
  ];
  for (const [name, a, b] of pass) assert.deepEqual(rules(a, b), [], name);
});

test('compat - narrowing changes are named by field and rule', () => {
  const refuse: Array<[string, Json, Json, string[]]> = [
    ['number to integer', { type: 'number' }, { type: 'integer' }, ['(data) type-changed']],
    ['nullable to not', { anyOf: [{ type: 'string' }, { type: 'null' }] }, { type: 'string' }, ['(data) type-changed']],
    ['any to string', {}, { type: 'string' }, ['(data) type-changed']],
    ['exclusive at the same bound', { type: 'number', minimum: 0 }, { type: 'number', exclusiveMinimum: 0 }, ['(data) bounds-tightened']],
    ['multipleOf not a divisor', { type: 'integer', multipleOf: 5 }, { type: 'integer', multipleOf: 10 }, ['(data) bounds-tightened']],
    ['uniqueItems', { type: 'array' }, { type: 'array', uniqueItems: true }, ['(data) bounds-tightened']],
    ['item type', { type: 'array', items: { type: 'string' } }, { type: 'array', items: { type: 'number' } }, ['[] type-changed']],
    [
      'nested field removed and another required',
      obj({ a: obj({ b: { type: 'string' }, c: { type: 'string' } }, ['b']) }),
      obj({ a: obj({ c: { type: 'string' } }, ['c']) }),
      ['a.b field-removed', 'a.c field-required'],
    ],
    [
      'record values narrowed',
      obj({}, [], { additionalProperties: { type: 'string' } }),
      obj({}, [], { additionalProperties: { const: 'x' } }),
      ['* const-changed'],
    ],
    ['a field name that is not an identifier', obj({ 'a b': { type: 'string' } }), obj({}), ['["a b"] field-removed']],
    ['an unknown keyword added', { type: 'string' }, { type: 'string', 'x-vendor': 1 }, ['(data) cannot-prove']],
    ['oneOf changed', { type: 'string' }, { oneOf: [{ type: 'string' }, { minLength: 1 }] }, ['(data) cannot-prove']],
    ['a $ref it cannot follow', { type: 'string' }, { $ref: 'other.json#/x' }, ['(data) cannot-prove']],
  ];
  for (const [name, a, b, want] of refuse) assert.deepEqual(rules(a, b), want, name);
});

test('compat - local references are followed, a recursive schema ends, and a changed $defs target is seen', () => {
  const tree = (nameType: string): Json => ({
    $defs: { node: obj({ name: { type: nameType }, children: { type: 'array', items: { $ref: '#/$defs/node' } } }) },
    ...(obj({ root: { $ref: '#/$defs/node' } }) as object),
  });
  assert.deepEqual(rules(tree('string'), tree('string')), []);
  assert.deepEqual(rules(tree('integer'), tree('number')), []);
  assert.deepEqual(rules(tree('number'), tree('string')), ['root.name type-changed']);
  const self = (t: string): Json => obj({ v: { type: t }, next: { $ref: '#' } }, ['v']);
  assert.deepEqual(rules(self('number'), self('string')), ['v type-changed']);
  assert.deepEqual(rules({ $ref: '#/$defs/missing' }, { type: 'string' }), ['(data) cannot-prove']);
});
