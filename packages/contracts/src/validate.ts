import type { StandardSchemaV1 } from '@standard-schema/spec';
import type { AnyContract } from './contract.js';
import { type ContractIssue, ContractValidatorError } from './errors.js';

/** What a contract's validator said of one value. */
export type CheckResult =
  | { readonly ok: true; readonly value: unknown }
  | { readonly ok: false; readonly issues: readonly ContractIssue[] };

const IDENT = /^[A-Za-z_$][\w$]*$/;

/** A Standard Schema path as text: `items[2].sku`, `["a b"]`, `[Symbol(x)]`. */
export function formatPath(path: StandardSchemaV1.Issue['path']): string {
  if (!path) return '';
  let out = '';
  for (const segment of path) {
    const key = typeof segment === 'object' && segment !== null ? segment.key : segment;
    if (typeof key === 'number') out += `[${key}]`;
    else if (typeof key === 'symbol') out += `[${String(key)}]`;
    else if (IDENT.test(key)) out += out ? `.${key}` : key;
    else out += `[${JSON.stringify(key)}]`;
  }
  return out;
}

function toIssues(issues: readonly StandardSchemaV1.Issue[]): ContractIssue[] {
  return issues.map((i) => ({ path: formatPath(i.path), message: typeof i.message === 'string' ? i.message : String(i.message) }));
}

/**
 * Run a contract's validator on `data`. Resolves with its output value or
 * its issues; a validator that throws (or rejects) becomes a
 * `ContractValidatorError` naming the type and version. Synchronous
 * validators (zod, valibot, arktype without async refinements) cost no
 * promise beyond the caller's own.
 */
export function checkData(contract: AnyContract, data: unknown): CheckResult | Promise<CheckResult> {
  let result: StandardSchemaV1.Result<unknown> | Promise<StandardSchemaV1.Result<unknown>>;
  try {
    result = contract.schema['~standard'].validate(data);
  } catch (err) {
    throw new ContractValidatorError(contract.type, contract.version, err);
  }
  if (result instanceof Promise) {
    return result.then(
      (r) => settle(contract, r),
      (err: unknown) => {
        throw new ContractValidatorError(contract.type, contract.version, err);
      },
    );
  }
  return settle(contract, result);
}

function settle(contract: AnyContract, result: StandardSchemaV1.Result<unknown>): CheckResult {
  if (typeof result !== 'object' || result === null) {
    throw new ContractValidatorError(
      contract.type,
      contract.version,
      new TypeError(`validate returned ${String(result)}, not { value } or { issues }`),
    );
  }
  if (result.issues)
    return { ok: false, issues: toIssues(result.issues.length ? result.issues : [{ message: 'refused (the validator named no issue)' }]) };
  return { ok: true, value: result.value };
}
