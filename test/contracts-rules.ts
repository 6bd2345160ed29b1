import assert from 'node:assert/strict';

// The snapshot edits of test/contracts-cli.test.ts: one per BACKWARD rule, each making the unchanged
// zod fixture registry break the edited snapshot in exactly that way.

// biome-ignore lint/suspicious/noExplicitAny: the tests reach into JSON Schemas they just parsed
export type Schema = Record<string, any>;
export interface SnapshotFile {
  format: string;
  contracts: Array<{ type: string; version: number; subject: string | null; dataschema: string; jsonSchema: Schema }>;
}

export function contractIn(snap: SnapshotFile, type: string, version: number) {
  const c = snap.contracts.find((x) => x.type === type && x.version === version);
  assert.ok(c, `${type} v${version} in the snapshot`);
  return c;
}

/** Each breaking rule: the snapshot is edited so that the unchanged zod registry breaks it in exactly that way. */
export const RULES: Array<{
  rule: string;
  path: string;
  detail: RegExp;
  edit: (snap: SnapshotFile) => void;
  type?: string;
  version?: number;
}> = [
  {
    rule: 'field-removed',
    path: 'legacy',
    detail: /optional field "legacy"/,
    edit: (s) => {
      v2Of(s).properties.legacy = { type: 'string' };
    },
  },
  {
    rule: 'type-changed',
    path: 'orderId',
    detail: /was number, now string/,
    edit: (s) => {
      v2Of(s).properties.orderId = { type: 'number' };
    },
  },
  {
    rule: 'field-required',
    path: 'kind',
    detail: /optional in the snapshot, required now/,
    edit: (s) => {
      v2Of(s).required = v2Of(s).required.filter((n: string) => n !== 'kind');
    },
  },
  {
    rule: 'field-required',
    path: 'total',
    detail: /a new field is required/,
    edit: (s) => {
      delete v2Of(s).properties.total;
      v2Of(s).required = v2Of(s).required.filter((n: string) => n !== 'total');
    },
  },
  {
    rule: 'enum-narrowed',
    path: 'total.currency',
    detail: /"GBP" no longer allowed/,
    edit: (s) => v2Of(s).properties.total.properties.currency.enum.push('GBP'),
  },
  {
    rule: 'const-changed',
    path: 'kind',
    detail: /was "purchase", now only "order"/,
    edit: (s) => {
      v2Of(s).properties.kind.const = 'purchase';
    },
  },
  {
    rule: 'additional-properties-closed',
    path: 'total',
    detail: /additionalProperties was allowed, now false/,
    edit: (s) => delete v2Of(s).properties.total.additionalProperties,
  },
  {
    rule: 'bounds-tightened',
    path: 'total.amountCents',
    detail: /lower bound was ≥ 0, now ≥ 1/,
    edit: (s) => {
      v2Of(s).properties.total.properties.amountCents.minimum = 0;
    },
  },
  {
    rule: 'bounds-tightened',
    path: 'orderId',
    detail: /maxLength was 100, now 64/,
    edit: (s) => {
      v2Of(s).properties.orderId.maxLength = 100;
    },
  },
  {
    rule: 'pattern-changed',
    path: 'lines[].sku',
    detail: /pattern was none, now "\^\[A-Z0-9-\]\+\$"/,
    edit: (s) => delete v2Of(s).properties.lines.items.properties.sku.pattern,
  },
  {
    rule: 'format-changed',
    path: 'at',
    detail: /format was none, now "date-time"/,
    type: 'OrderShipped',
    version: 1,
    edit: (s) => delete contractIn(s, 'OrderShipped', 1).jsonSchema.properties.at.format,
  },
  {
    rule: 'version-removed',
    path: '',
    detail: /the registry has "OrderPlaced" v1\.\.v2/,
    version: 3,
    edit: (s) => s.contracts.push({ ...contractIn(s, 'OrderPlaced', 2), version: 3, dataschema: 'ferry:OrderPlaced/v3' }),
  },
  {
    rule: 'dataschema-changed',
    path: '',
    detail: /ce-dataschema was "urn:old:OrderPlaced:2", now "ferry:OrderPlaced\/v2"/,
    edit: (s) => {
      contractIn(s, 'OrderPlaced', 2).dataschema = 'urn:old:OrderPlaced:2';
    },
  },
  {
    rule: 'cannot-prove',
    path: 'orderId',
    detail: /keyword not:/,
    edit: (s) => {
      v2Of(s).properties.orderId.not = { const: '' };
    },
  },
  {
    rule: 'cannot-prove',
    path: 'customer',
    detail: /keyword \$ref: "https:\/\/example\.com\/customer\.json" cannot be followed/,
    edit: (s) => {
      v2Of(s).properties.customer = { $ref: 'https://example.com/customer.json' };
    },
  },
];

function v2Of(s: SnapshotFile): Schema {
  return contractIn(s, 'OrderPlaced', 2).jsonSchema;
}
