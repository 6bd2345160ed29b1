import { describeValue, ValidationError, validateSubject, validateType } from '@ferry/core';
import type { StandardSchemaV1 } from '@standard-schema/spec';

/** Any validator that implements Standard Schema v1: zod ≥ 3.24, valibot ≥ 1.0, arktype ≥ 2.0, Effect Schema, … */
export type AnySchema = StandardSchemaV1<unknown, unknown>;

/** The most versions one event type may have. */
export const MAX_CONTRACT_VERSION = 1_000_000;

/**
 * What `defineEvent()` takes: one event type at one version.
 *
 * @example
 * const OrderPlacedV1 = defineEvent({
 *   type: 'OrderPlaced', version: 1, subject: 'orders.placed',
 *   schema: v.object({ orderId: v.string(), total: v.number() }),
 *   upcast: (d) => ({ orderId: d.orderId, total: { amount: d.total, currency: 'EUR' } }),
 * });
 */
export interface EventContractInput<T extends string, V extends number, S extends AnySchema> {
  /** The event type, e.g. `OrderPlaced` (the CloudEvents `type`). */
  type: T;
  /** 1, 2, 3… A published version never changes shape: a breaking change is a new version. */
  version: V;
  /** The subject this type is published on unless `publish` names another. */
  subject?: string;
  /** The validator of `data` at this version: any Standard Schema. */
  schema: S;
  /**
   * This version's data → the next version's data. Required on every version but a type's last;
   * the inbox chains them to bring an old event to the version its handler takes.
   */
  upcast?: (data: StandardSchemaV1.InferOutput<S>) => unknown;
  /**
   * The JSON Schema of `data`, for validators that cannot export one (`ferry contracts snapshot`,
   * `check` and `asyncapi` read it). Default: the validator's own Standard JSON Schema export.
   */
  jsonSchema?: Record<string, unknown>;
  /** One line for people: what happened. Shown in the AsyncAPI document. */
  description?: string;
}

/** One event type at one version, as `defineEvent()` returns it. */
export interface EventContract<T extends string = string, V extends number = number, S extends AnySchema = AnySchema> {
  readonly type: T;
  readonly version: V;
  readonly subject: string | undefined;
  readonly schema: S;
  readonly upcast: ((data: unknown) => unknown) | undefined;
  readonly jsonSchema: Readonly<Record<string, unknown>> | undefined;
  readonly description: string | undefined;
}

export type AnyContract = EventContract<string, number, AnySchema>;

/** The data a contract's validator accepts (what `publish` takes). */
export type ContractInput<C> = C extends EventContract<string, number, infer S> ? StandardSchemaV1.InferInput<S> : never;
/** The data a contract's validator returns (what a handler gets). */
export type ContractOutput<C> = C extends EventContract<string, number, infer S> ? StandardSchemaV1.InferOutput<S> : never;

function isStandardSchema(value: unknown): value is AnySchema {
  if ((typeof value !== 'object' && typeof value !== 'function') || value === null) return false;
  const props = (value as { '~standard'?: unknown })['~standard'];
  return (
    typeof props === 'object' &&
    props !== null &&
    (props as { version?: unknown }).version === 1 &&
    typeof (props as { validate?: unknown }).validate === 'function'
  );
}

/**
 * One event type at one version: its validator, its default subject and the
 * upcaster to the next version. Throws a `ValidationError` naming the field
 * for a contract that could never work.
 */
export function defineEvent<const T extends string, const V extends number, S extends AnySchema>(
  input: EventContractInput<T, V, S>,
): EventContract<T, V, S> {
  if (typeof input !== 'object' || input === null) {
    throw new ValidationError('contract', `defineEvent takes { type, version, schema }, got ${describeValue(input)}`);
  }
  const type = validateType(input.type, 'contract.type') as T;
  const where = `contract ${JSON.stringify(type)}`;
  if (!Number.isSafeInteger(input.version) || input.version < 1 || input.version > MAX_CONTRACT_VERSION) {
    throw new ValidationError(
      'contract.version',
      `${where}: version must be a whole number from 1 to ${MAX_CONTRACT_VERSION}, got ${describeValue(input.version)}`,
    );
  }
  const at = `${where} v${input.version}`;
  if (!isStandardSchema(input.schema)) {
    throw new ValidationError(
      'contract.schema',
      `${at}: schema must be a Standard Schema v1 validator (zod, valibot, arktype, …: an object with "~standard".validate), got ${describeValue(input.schema)}`,
    );
  }
  if (input.upcast !== undefined && typeof input.upcast !== 'function') {
    throw new ValidationError(
      'contract.upcast',
      `${at}: upcast must be a function from this version's data to the next's, got ${describeValue(input.upcast)}`,
    );
  }
  if (
    input.jsonSchema !== undefined &&
    (typeof input.jsonSchema !== 'object' || input.jsonSchema === null || Array.isArray(input.jsonSchema))
  ) {
    throw new ValidationError(
      'contract.jsonSchema',
      `${at}: jsonSchema must be a JSON Schema object, got ${describeValue(input.jsonSchema)}`,
    );
  }
  const subject = input.subject === undefined ? undefined : validateSubject(input.subject, 'contract.subject');
  return Object.freeze({
    type,
    version: input.version,
    subject,
    schema: input.schema,
    upcast: input.upcast as ((data: unknown) => unknown) | undefined,
    jsonSchema: input.jsonSchema,
    description: input.description,
  });
}
