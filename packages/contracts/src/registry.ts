import { CONTROL_CHARACTER, describeValue, ValidationError } from '@ferry/core';
import type { AnyContract, ContractInput, ContractOutput, EventContract } from './contract.js';

/** `ce-dataschema` of a contract: a template with `{type}` and `{version}`, or a function. */
export type DataschemaTemplate = string | ((contract: AnyContract) => string);

/** The default `ce-dataschema`: `ferry:OrderPlaced/v2`. */
export const DEFAULT_DATASCHEMA = 'ferry:{type}/v{version}';

export interface ContractsOptions {
  /**
   * The CloudEvents `dataschema` URI stamped on each event: a template with `{type}` and
   * `{version}` (e.g. `https://schemas.example.com/{type}/v{version}.json`) or a function.
   * Default `ferry:{type}/v{version}`. Producer and consumer must use the same one: the inbox
   * finds an event's contract by it.
   */
  dataschema?: DataschemaTemplate;
}

const BRAND = Symbol.for('ferry.contracts.registry');

/**
 * The registry's event map: each type's data as its newest version's validator returns it,
 * which is what a handler gets after any upcasting.
 */
export type ContractEventMap<R> = R extends ContractRegistry<infer C> ? { [T in C['type']]: ContractOutput<Latest<C, T>> } : never;

/** The newest version of type `T` among the contracts `C` (exact for versions up to 64; beyond, every version counts as newest). */
export type Latest<C extends AnyContract, T extends string> = LatestOf<Extract<C, { type: T }>>;
type LatestOf<X extends AnyContract, All extends AnyContract = X> = X extends AnyContract
  ? [Greater<X['version'], All['version']>] extends [never]
    ? X
    : never
  : never;
type Greater<V extends number, All extends number> = All extends number ? (IsGreater<All, V> extends true ? All : never) : never;
type BuildTuple<N extends number, T extends unknown[] = []> = T['length'] extends N
  ? T
  : T['length'] extends 64
    ? T
    : BuildTuple<N, [...T, unknown]>;
type IsGreater<A extends number, B extends number> = A extends B
  ? false
  : BuildTuple<A> extends [...BuildTuple<B>, unknown, ...unknown[]]
    ? true
    : false;

/** The data `publish` accepts for type `T` at version `V` (the validator's input). */
export type PublishData<C extends AnyContract, T extends string, V extends number> = ContractInput<Extract<C, { type: T; version: V }>>;

/**
 * A set of contracts: every event type an application publishes or consumes,
 * each at versions 1..n. Built by `defineContracts()`, which refuses two
 * contracts for one type and version, a gap in a type's versions, and a
 * missing upcaster, so a registry that exists is whole.
 */
export class ContractRegistry<C extends AnyContract = AnyContract> {
  readonly [BRAND] = true;
  /** Every contract, by type then version. */
  readonly contracts: readonly C[];
  readonly #byType = new Map<string, C[]>();
  readonly #byDataschema = new Map<string, C>();
  readonly #dataschema = new Map<C, string>();

  constructor(contracts: readonly C[], options: ContractsOptions = {}) {
    const template = options.dataschema ?? DEFAULT_DATASCHEMA;
    if (typeof template !== 'string' && typeof template !== 'function') {
      throw new ValidationError(
        'contracts.dataschema',
        `dataschema must be a template such as "https://schemas.example.com/{type}/v{version}.json" or a function, got ${describeValue(template)}`,
      );
    }
    if (!Array.isArray(contracts)) {
      throw new ValidationError('contracts', `defineContracts takes an array of defineEvent() contracts, got ${describeValue(contracts)}`);
    }
    for (const [i, c] of contracts.entries()) {
      if (typeof c !== 'object' || c === null || typeof c.type !== 'string' || typeof c.version !== 'number' || !Object.isFrozen(c)) {
        throw new ValidationError(`contracts[${i}]`, `contracts[${i}] is not a contract made by defineEvent(), got ${describeValue(c)}`);
      }
      const list = this.#byType.get(c.type) ?? [];
      const same = list.find((o) => o.version === c.version);
      if (same) {
        throw new ValidationError(
          `contracts[${i}]`,
          `two contracts for ${JSON.stringify(c.type)} v${c.version}: a published version never changes; give the new shape version ${Math.max(...list.map((o) => o.version)) + 1}`,
        );
      }
      list.push(c);
      this.#byType.set(c.type, list);
    }
    for (const [type, list] of this.#byType) {
      list.sort((a, b) => a.version - b.version);
      for (const [i, c] of list.entries()) {
        if (c.version !== i + 1) {
          throw new ValidationError(
            'contracts',
            `${JSON.stringify(type)} has versions ${list.map((o) => o.version).join(', ')}: version ${i + 1} is missing; versions run 1..n with no gap, so each older event can be upcast step by step`,
          );
        }
        const last = i === list.length - 1;
        if (!last && !c.upcast) {
          throw new ValidationError(
            'contracts',
            `${JSON.stringify(type)} v${c.version} has no upcast to v${c.version + 1}: give it upcast: (v${c.version}Data) => v${c.version + 1}Data`,
          );
        }
        if (last && c.upcast) {
          throw new ValidationError(
            'contracts',
            `${JSON.stringify(type)} v${c.version} has an upcast but there is no v${c.version + 1}: remove it, or add v${c.version + 1}`,
          );
        }
        const uri =
          typeof template === 'function' ? template(c) : template.replaceAll('{type}', c.type).replaceAll('{version}', String(c.version));
        if (typeof uri !== 'string' || uri.length === 0 || uri.length > 1024 || CONTROL_CHARACTER.test(uri) || uri.trim() !== uri) {
          throw new ValidationError(
            'contracts.dataschema',
            `dataschema of ${JSON.stringify(type)} v${c.version} is ${describeValue(uri)}: it must be a non-empty URI of at most 1024 characters without control characters or whitespace at either end (a NATS header value)`,
          );
        }
        const other = this.#byDataschema.get(uri);
        if (other) {
          throw new ValidationError(
            'contracts.dataschema',
            `${JSON.stringify(type)} v${c.version} and ${JSON.stringify(other.type)} v${other.version} both have dataschema ${JSON.stringify(uri)}: the template must name {type} and {version}`,
          );
        }
        this.#byDataschema.set(uri, c);
        this.#dataschema.set(c, uri);
      }
    }
    this.contracts = [...this.#byType.values()].flat();
    Object.freeze(this);
  }

  /** The event types, in the order they were first given. */
  types(): string[] {
    return [...this.#byType.keys()];
  }

  /** Every version of `type`, oldest first (empty when the registry lacks it). */
  versions(type: string): readonly C[] {
    return this.#byType.get(type) ?? [];
  }

  /** The contract of `type` at `version`. */
  get(type: string, version: number): C | undefined {
    return this.#byType.get(type)?.[version - 1];
  }

  /** The newest version of `type`. */
  latest(type: string): C | undefined {
    const list = this.#byType.get(type);
    return list?.[list.length - 1];
  }

  /** The `ce-dataschema` URI stamped on events of `contract`. */
  dataschema(contract: C): string {
    const uri = this.#dataschema.get(contract);
    if (uri === undefined)
      throw new ValidationError('contract', `${JSON.stringify(contract.type)} v${contract.version} is not in this registry`);
    return uri;
  }

  /** The contract a `ce-dataschema` URI names. */
  byDataschema(uri: string): C | undefined {
    return this.#byDataschema.get(uri);
  }
}

/** Whether `value` is a registry made by `defineContracts()` (also across copies of this package). */
export function isContractRegistry(value: unknown): value is ContractRegistry {
  return typeof value === 'object' && value !== null && (value as { [BRAND]?: unknown })[BRAND] === true;
}

/**
 * Group contracts into a registry. Throws a `ValidationError` for two
 * contracts of one type and version, a gap in a type's versions, a version
 * without an upcaster to the next, or a `dataschema` template that does not
 * tell contracts apart.
 *
 * @example
 * export const contracts = defineContracts([OrderPlacedV1, OrderPlacedV2, OrderCancelledV1]);
 */
export function defineContracts<const L extends readonly EventContract[]>(
  contracts: L,
  options?: ContractsOptions,
): ContractRegistry<L[number]> {
  return new ContractRegistry<L[number]>(contracts, options);
}
