import { isJsonObject, type Json, type JsonObject, own, sameJson, setOwn } from './json-schema.js';

// The BACKWARD rule of the schema registries, on JSON Schema: every value the snapshot's schema
// accepts must still be accepted, with the same meaning, by the registry's. Each keyword Ferry knows
// is compared by what it allows; any other keyword that differs is "cannot prove compatible" rather
// than a guess, so a pass is a proof for the keywords the validators emit.
// One file of ~390 lines: compare() and the keyword comparisons recurse into each other, and the
// keyword tables (HANDLED, ANNOTATIONS) must stay beside the code that honours them.

/** Why a change breaks data already published. A closed set: `--json` and tests match on it. */
export const COMPAT_RULES = [
  'field-removed',
  'type-changed',
  'field-required',
  'enum-narrowed',
  'const-changed',
  'additional-properties-closed',
  'bounds-tightened',
  'pattern-changed',
  'format-changed',
  'version-removed',
  'dataschema-changed',
  'cannot-prove',
] as const;
export type CompatRule = (typeof COMPAT_RULES)[number];

/** One breaking (or unprovable) change at one place in `data`. */
export interface SchemaChange {
  /** Where in `data`: `total.currency`, `items[]`, `meta.*`; empty for `data` itself. */
  readonly path: string;
  readonly rule: CompatRule;
  /** What changed, in words: `was string, now number`. */
  readonly detail: string;
}

/** Keywords that say nothing about which values are valid. */
const ANNOTATIONS = new Set([
  '$schema',
  '$id',
  '$anchor',
  '$comment',
  'title',
  'description',
  'examples',
  'default',
  'deprecated',
  'readOnly',
  'writeOnly',
  'contentMediaType',
  'contentEncoding',
  'contentSchema',
  '$defs',
  'definitions',
]);

/** Keywords compared by what they allow, below; `$ref` is followed before. */
const HANDLED = new Set([
  'type',
  'const',
  'enum',
  'minimum',
  'exclusiveMinimum',
  'maximum',
  'exclusiveMaximum',
  'minLength',
  'maxLength',
  'minItems',
  'maxItems',
  'minProperties',
  'maxProperties',
  'multipleOf',
  'uniqueItems',
  'pattern',
  'format',
  'properties',
  'required',
  'additionalProperties',
  'items',
  'prefixItems',
]);

const LOWER_COUNTS = ['minLength', 'minItems', 'minProperties'] as const;
const UPPER_COUNTS = ['maxLength', 'maxItems', 'maxProperties'] as const;
const IDENT = /^[A-Za-z_$][\w$]*$/;

/** `parent` and a property name as a path: `total.currency`, `meta["a b"]`. */
export function joinPath(parent: string, key: string): string {
  if (IDENT.test(key)) return parent ? `${parent}.${key}` : key;
  return `${parent}[${JSON.stringify(key)}]`;
}

interface Ctx {
  readonly oldRoot: Json;
  readonly newRoot: Json;
  /** Pairs of `$ref`s being compared: a recursive schema compares each pair once. */
  readonly active: Set<string>;
  /** The two roots' `$defs` and `definitions` are the same: a `#/$defs/…` reference means the same in both. */
  readonly defsSame: boolean;
}

function hasRef(node: Json, rootOnly: boolean): boolean {
  if (Array.isArray(node)) return node.some((v) => hasRef(v, rootOnly));
  if (!isJsonObject(node)) return false;
  const ref = own(node, '$ref');
  if (typeof ref === 'string' && (!rootOnly || ref === '#' || !ref.startsWith('#/'))) return true;
  return Object.keys(node).some((k) => hasRef(node[k] as Json, rootOnly));
}

/** Equal text that means the same: no reference in it whose target differs between the two roots. */
function identical(a: Json, b: Json, ctx: Ctx): boolean {
  return sameJson(a, b) && !hasRef(a, ctx.defsSame);
}

type Resolved = { schema: Json; ref?: string } | { unresolved: string };

function pointer(root: Json, ref: string): Json | undefined {
  if (ref === '#') return root;
  let at: Json | undefined = root;
  for (const raw of ref.slice(2).split('/')) {
    const key = decodeURIComponent(raw).replaceAll('~1', '/').replaceAll('~0', '~');
    if (Array.isArray(at)) at = /^\d+$/.test(key) ? at[Number(key)] : undefined;
    else if (isJsonObject(at)) at = own(at, key);
    else return undefined;
  }
  return at;
}

/** Follow a local `$ref` (`#`, `#/$defs/X`); its sibling keywords are kept beside the target's. */
function resolve(node: Json, root: Json): Resolved {
  let at = node;
  let ref: string | undefined;
  for (let hops = 0; isJsonObject(at) && typeof own(at, '$ref') === 'string'; hops++) {
    const r = own(at, '$ref') as string;
    const target = r === '#' || r.startsWith('#/') ? pointer(root, r) : undefined;
    if (target === undefined || hops > 32) return { unresolved: r };
    ref = r;
    if (!isJsonObject(target)) {
      at = target;
      break;
    }
    const merged: JsonObject = {};
    for (const k of Object.keys(target)) setOwn(merged, k, target[k] as Json);
    for (const k of Object.keys(at)) if (k !== '$ref' && !Object.hasOwn(merged, k)) setOwn(merged, k, at[k] as Json);
    at = merged;
  }
  return ref === undefined ? { schema: at } : { schema: at, ref };
}

function isUnionOnly(s: JsonObject): 'anyOf' | 'oneOf' | undefined {
  const kind = Array.isArray(own(s, 'anyOf')) ? 'anyOf' : Array.isArray(own(s, 'oneOf')) ? 'oneOf' : undefined;
  if (!kind) return undefined;
  return Object.keys(s).every((k) => k === kind || ANNOTATIONS.has(k)) ? kind : undefined;
}

const show = (v: Json | undefined) => (v === undefined ? 'none' : JSON.stringify(v));

function typesOf(s: JsonObject, fromValues: boolean): string[] | undefined {
  const t = own(s, 'type');
  if (typeof t === 'string') return [t];
  if (Array.isArray(t)) return t.filter((x): x is string => typeof x === 'string');
  if (!fromValues) return undefined;
  const values = Object.hasOwn(s, 'const')
    ? [own(s, 'const') as Json]
    : Array.isArray(own(s, 'enum'))
      ? (own(s, 'enum') as Json[])
      : undefined;
  if (!values) return undefined;
  const jsonType = (v: Json) =>
    v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v === 'number' ? (Number.isInteger(v) ? 'integer' : 'number') : typeof v;
  return [...new Set(values.map(jsonType))];
}

/** Compare the snapshot's schema `oldRoot` with the registry's `newRoot`: each change that breaks data valid under the old. */
export function compareSchemas(oldRoot: Json, newRoot: Json): SchemaChange[] {
  const defs = (root: Json, k: string) => (isJsonObject(root) ? own(root, k) : undefined);
  const defsSame =
    sameJson(defs(oldRoot, '$defs'), defs(newRoot, '$defs')) && sameJson(defs(oldRoot, 'definitions'), defs(newRoot, 'definitions'));
  // The roots are being compared: a `#` reference back to them adds nothing.
  return compare(oldRoot, newRoot, '', { oldRoot, newRoot, active: new Set(['#\u0000#']), defsSame });
}

function compare(oldNode: Json, newNode: Json, path: string, ctx: Ctx): SchemaChange[] {
  if (identical(oldNode, newNode, ctx)) return [];
  const o = resolve(oldNode, ctx.oldRoot);
  const n = resolve(newNode, ctx.newRoot);
  if ('unresolved' in o || 'unresolved' in n) {
    // A reference Ferry cannot follow is compared as text: unchanged passes, changed is refused.
    if (sameJson(oldNode, newNode)) return [];
    const ref = 'unresolved' in o ? o.unresolved : (n as { unresolved: string }).unresolved;
    return [
      { path, rule: 'cannot-prove', detail: `keyword $ref: ${JSON.stringify(ref)} cannot be followed (only local "#/…" references are)` },
    ];
  }
  const pair = o.ref !== undefined || n.ref !== undefined ? `${o.ref ?? ''}\u0000${n.ref ?? ''}` : undefined;
  if (pair !== undefined) {
    // A recursive schema reaches the same pair again: what holds for its first visit holds here.
    if (ctx.active.has(pair)) return [];
    ctx.active.add(pair);
  }
  try {
    return compareResolved(o.schema, n.schema, path, ctx);
  } finally {
    if (pair !== undefined) ctx.active.delete(pair);
  }
}

function compareResolved(a: Json, b: Json, path: string, ctx: Ctx): SchemaChange[] {
  if (identical(a, b, ctx) || a === false || b === true) return [];
  if (b === false) return [{ path, rule: 'type-changed', detail: 'the registry accepts no value here (false)' }];
  const A = a === true ? {} : a;
  const B = b;
  if (!isJsonObject(A) || !isJsonObject(B)) {
    return [{ path, rule: 'cannot-prove', detail: `keyword (schema): ${show(a)} → ${show(b)} is not a JSON Schema` }];
  }
  const oldUnion = isUnionOnly(A);
  if (oldUnion) return (own(A, oldUnion) as Json[]).flatMap((branch) => compare(branch, B, path, ctx));
  const newUnion = isUnionOnly(B);
  if (newUnion) {
    const oldTypes = typesOf(A, false);
    if (oldTypes && oldTypes.length > 1) {
      return oldTypes.flatMap((t) => {
        const one: JsonObject = {};
        for (const k of Object.keys(A)) setOwn(one, k, k === 'type' ? t : (A[k] as Json));
        return compare(one, B, path, ctx);
      });
    }
    const results = (own(B, newUnion) as Json[]).map((branch) => compare(A, branch, path, ctx));
    if (newUnion === 'oneOf') {
      // oneOf refuses a value that two branches accept: a match is no proof.
      return [{ path, rule: 'cannot-prove', detail: 'keyword oneOf: changed, and a value matching two branches would be refused' }];
    }
    if (results.some((r) => r.length === 0)) return [];
    return results.reduce((best, r) => (r.length < best.length ? r : best));
  }
  return compareNode(A, B, path, ctx);
}

function compareNode(A: JsonObject, B: JsonObject, path: string, ctx: Ctx): SchemaChange[] {
  const out: SchemaChange[] = [];
  const add = (rule: CompatRule, detail: string, at = path) => out.push({ path: at, rule, detail });

  const oldTypes = typesOf(A, true);
  const newTypes = typesOf(B, false);
  if (newTypes) {
    const covered = (t: string) => newTypes.includes(t) || (t === 'integer' && newTypes.includes('number'));
    const lost = oldTypes ? oldTypes.filter((t) => !covered(t)) : ['any'];
    if (lost.length > 0) {
      add('type-changed', `was ${oldTypes ? oldTypes.join(' | ') : 'any type'}, now ${newTypes.join(' | ')}`);
      return out; // every other keyword here would only repeat it
    }
  }

  const oldValues = Object.hasOwn(A, 'const')
    ? [own(A, 'const') as Json]
    : Array.isArray(own(A, 'enum'))
      ? (own(A, 'enum') as Json[])
      : undefined;
  if (Object.hasOwn(B, 'const')) {
    const c = own(B, 'const') as Json;
    if (!oldValues?.every((v) => sameJson(v, c)))
      add('const-changed', `was ${oldValues ? oldValues.map(show).join(' | ') : 'any value'}, now only ${show(c)}`);
  }
  const newEnum = own(B, 'enum');
  if (newEnum !== undefined) {
    if (!Array.isArray(newEnum)) add('cannot-prove', `keyword enum: ${show(newEnum)} is not an array`);
    else if (!oldValues) add('enum-narrowed', `was any value, now one of ${newEnum.map(show).join(', ')}`);
    else {
      const lost = oldValues.filter((v) => !newEnum.some((w) => sameJson(v, w)));
      if (lost.length > 0)
        add('enum-narrowed', `${lost.map(show).join(', ')} no longer allowed (now one of ${newEnum.map(show).join(', ')})`);
    }
  }

  compareBounds(A, B, add);

  for (const k of ['pattern', 'format'] as const) {
    const was = own(A, k);
    const now = own(B, k);
    if (now !== undefined && !sameJson(was, now))
      add(k === 'pattern' ? 'pattern-changed' : 'format-changed', `${k} was ${show(was)}, now ${show(now)}`);
  }

  compareObject(A, B, path, ctx, out);
  compareArray(A, B, path, ctx, out);

  for (const k of new Set([...Object.keys(A), ...Object.keys(B)])) {
    if (HANDLED.has(k) || ANNOTATIONS.has(k)) continue;
    if (!sameJson(own(A, k), own(B, k))) add('cannot-prove', `keyword ${k}: was ${show(own(A, k))}, now ${show(own(B, k))}`);
  }
  return out;
}

type Add = (rule: CompatRule, detail: string, at?: string) => void;

function bound(s: JsonObject, inclusive: string, exclusive: string): { value: number; exclusive: boolean } | undefined {
  const i = own(s, inclusive);
  const e = own(s, exclusive);
  const fromI = typeof i === 'number' ? { value: i, exclusive: false } : undefined;
  const fromE = typeof e === 'number' ? { value: e, exclusive: true } : undefined;
  if (!fromI || !fromE) return fromI ?? fromE;
  return inclusive === 'minimum' ? (fromE.value >= fromI.value ? fromE : fromI) : fromE.value <= fromI.value ? fromE : fromI;
}

function compareBounds(A: JsonObject, B: JsonObject, add: Add): void {
  const text = (b: { value: number; exclusive: boolean } | undefined, lower: boolean) =>
    b ? `${lower ? (b.exclusive ? '>' : '≥') : b.exclusive ? '<' : '≤'} ${b.value}` : 'none';
  const lo = [bound(A, 'minimum', 'exclusiveMinimum'), bound(B, 'minimum', 'exclusiveMinimum')] as const;
  if (lo[1] && (!lo[0] || lo[1].value > lo[0].value || (lo[1].value === lo[0].value && lo[1].exclusive && !lo[0].exclusive))) {
    add('bounds-tightened', `lower bound was ${text(lo[0], true)}, now ${text(lo[1], true)}`);
  }
  const hi = [bound(A, 'maximum', 'exclusiveMaximum'), bound(B, 'maximum', 'exclusiveMaximum')] as const;
  if (hi[1] && (!hi[0] || hi[1].value < hi[0].value || (hi[1].value === hi[0].value && hi[1].exclusive && !hi[0].exclusive))) {
    add('bounds-tightened', `upper bound was ${text(hi[0], false)}, now ${text(hi[1], false)}`);
  }
  for (const k of LOWER_COUNTS) {
    const was = own(A, k);
    const now = own(B, k);
    if (typeof now === 'number' && !(typeof was === 'number' && was >= now)) add('bounds-tightened', `${k} was ${show(was)}, now ${now}`);
  }
  for (const k of UPPER_COUNTS) {
    const was = own(A, k);
    const now = own(B, k);
    if (typeof now === 'number' && !(typeof was === 'number' && was <= now)) add('bounds-tightened', `${k} was ${show(was)}, now ${now}`);
  }
  const m0 = own(A, 'multipleOf');
  const m1 = own(B, 'multipleOf');
  if (typeof m1 === 'number' && !(typeof m0 === 'number' && Number.isInteger(m0 / m1)))
    add('bounds-tightened', `multipleOf was ${show(m0)}, now ${m1}`);
  if (own(B, 'uniqueItems') === true && own(A, 'uniqueItems') !== true) add('bounds-tightened', 'uniqueItems was off, now true');
}

function names(s: JsonObject): Set<string> {
  const r = own(s, 'required');
  return new Set(Array.isArray(r) ? r.filter((x): x is string => typeof x === 'string') : []);
}

function compareObject(A: JsonObject, B: JsonObject, path: string, ctx: Ctx, out: SchemaChange[]): void {
  const op = own(A, 'properties');
  const np = own(B, 'properties');
  const oldProps = isJsonObject(op) ? op : {};
  const newProps = isJsonObject(np) ? np : {};
  const oldReq = names(A);
  const newReq = names(B);
  for (const key of Object.keys(oldProps)) {
    const at = joinPath(path, key);
    if (!Object.hasOwn(newProps, key)) {
      out.push({
        path: at,
        rule: 'field-removed',
        detail: `the snapshot has ${oldReq.has(key) ? 'required' : 'optional'} field ${JSON.stringify(key)}, the registry does not`,
      });
    } else out.push(...compare(oldProps[key] as Json, newProps[key] as Json, at, ctx));
  }
  for (const key of newReq) {
    if (oldReq.has(key)) continue;
    const fresh = !Object.hasOwn(oldProps, key);
    out.push({
      path: joinPath(path, key),
      rule: 'field-required',
      detail: fresh ? 'a new field is required: data published without it is refused' : 'optional in the snapshot, required now',
    });
  }
  const oa = own(A, 'additionalProperties');
  const na = own(B, 'additionalProperties');
  if (na === undefined || na === true || oa === false || sameJson(oa, na)) return;
  if (na === false) {
    out.push({
      path,
      rule: 'additional-properties-closed',
      detail: 'additionalProperties was allowed, now false: data with any other field is refused',
    });
  } else out.push(...compare(oa ?? true, na, path ? `${path}.*` : '*', ctx));
}

function compareArray(A: JsonObject, B: JsonObject, path: string, ctx: Ctx, out: SchemaChange[]): void {
  const op = own(A, 'prefixItems');
  const np = own(B, 'prefixItems');
  const oi = own(A, 'items');
  const ni = own(B, 'items');
  if (op === undefined && np === undefined) {
    if (ni !== undefined && !Array.isArray(ni) && !Array.isArray(oi)) out.push(...compare(oi ?? true, ni, `${path}[]`, ctx));
    else if (!sameJson(oi, ni)) out.push({ path, rule: 'cannot-prove', detail: `keyword items: was ${show(oi)}, now ${show(ni)}` });
    return;
  }
  if (!Array.isArray(op) || !Array.isArray(np) || op.length !== np.length) {
    if (!sameJson(op, np) || !sameJson(oi, ni))
      out.push({ path, rule: 'cannot-prove', detail: `keyword prefixItems: was ${show(op)}, now ${show(np)}` });
    return;
  }
  np.forEach((s, i) => {
    out.push(...compare(op[i] as Json, s, `${path}[${i}]`, ctx));
  });
  if (ni !== undefined) out.push(...compare(oi ?? true, ni, `${path}[]`, ctx));
}
