import { WIRE_HEADERS } from '@ferry/core';
import type { AnyContract } from './contract.js';
import { type ContractIssue, formatIssues } from './errors.js';
import type { ContractRegistry } from './registry.js';
import { type CheckResult, checkData } from './validate.js';

/** Why a consumer cannot hand an event to its handler (the inbox parks it with this reason). */
export type ContractParkReason = 'invalid-data' | 'unknown-version' | 'upcast-failed';

/** An event's data as its handler takes it, or why it cannot be. */
export type ConsumedData =
  | {
      readonly ok: true;
      /** The data at the handler's version, as its validator returned it. */
      readonly value: unknown;
      /** The version the event was published at. */
      readonly fromVersion: number;
      /** The version the handler takes (the registry's newest of the type). */
      readonly version: number;
    }
  | { readonly ok: false; readonly reason: ContractParkReason; readonly error: string; readonly issues?: readonly ContractIssue[] };

const VERSION_TEXT = /^[1-9]\d{0,6}$/;

/** The contract an event was published under: by `ce-dataschema`, else `ce-dataversion`, else version 1 (published before contracts). */
export function publishedContract(
  registry: ContractRegistry,
  type: string,
  headers: Readonly<Record<string, string>>,
): AnyContract | { reason: 'unknown-version'; error: string } {
  const known = () => {
    const n = registry.versions(type).length;
    return n === 0
      ? `this consumer's registry has no contract for ${JSON.stringify(type)}`
      : `this consumer knows ${JSON.stringify(type)} v1..v${n}`;
  };
  const uri = Object.hasOwn(headers, WIRE_HEADERS.dataschema) ? headers[WIRE_HEADERS.dataschema] : undefined;
  const versionText = Object.hasOwn(headers, WIRE_HEADERS.dataversion) ? headers[WIRE_HEADERS.dataversion] : undefined;
  if (versionText !== undefined && !VERSION_TEXT.test(versionText)) {
    return {
      reason: 'unknown-version',
      error: `${WIRE_HEADERS.dataversion} ${JSON.stringify(versionText.slice(0, 40))} is not a contract version (1, 2, 3…)`,
    };
  }
  if (uri !== undefined) {
    const c = registry.byDataschema(uri);
    if (!c || c.type !== type) {
      return {
        reason: 'unknown-version',
        error: `${WIRE_HEADERS.dataschema} ${JSON.stringify(uri.slice(0, 200))} names no contract of ${JSON.stringify(type)} that this consumer knows (${known()}): deploy the consumer with that contract, then retry the parked event`,
      };
    }
    if (versionText !== undefined && Number(versionText) !== c.version) {
      return {
        reason: 'unknown-version',
        error: `${WIRE_HEADERS.dataversion} ${versionText} disagrees with ${WIRE_HEADERS.dataschema} ${JSON.stringify(uri)} (v${c.version})`,
      };
    }
    return c;
  }
  const version = versionText === undefined ? 1 : Number(versionText);
  const c = registry.get(type, version);
  if (!c) {
    return {
      reason: 'unknown-version',
      error: `${JSON.stringify(type)} v${version} is newer than this consumer knows (${known()}): deploy the consumer with v${version}'s contract, then retry the parked event`,
    };
  }
  return c;
}

async function check(contract: AnyContract, data: unknown): Promise<CheckResult | { ok: false; threw: string }> {
  try {
    return await checkData(contract, data);
  } catch (err) {
    return { ok: false, threw: err instanceof Error ? err.message : String(err) };
  }
}

/**
 * Bring an event's data to the version its handler takes: validate it
 * against the contract it was published under, upcast it one version at a
 * time, validating each step's result. Never throws: every failure is a park
 * reason with the validator's or upcaster's words.
 */
export async function consumeData(
  registry: ContractRegistry,
  type: string,
  headers: Readonly<Record<string, string>>,
  data: unknown,
): Promise<ConsumedData> {
  const target = registry.latest(type);
  const from = publishedContract(registry, type, headers);
  if (!target || 'reason' in from) {
    return { ok: false, reason: 'unknown-version', error: 'reason' in from ? from.error : `no contract for ${JSON.stringify(type)}` };
  }
  const first = await check(from, data);
  if (!first.ok) {
    const error =
      'threw' in first ? first.threw : `${JSON.stringify(type)} v${from.version} refused the data: ${formatIssues(first.issues)}`;
    return { ok: false, reason: 'invalid-data', error, ...('issues' in first ? { issues: first.issues } : {}) };
  }
  let value = first.value;
  let at: AnyContract = from;
  while (at.version < target.version) {
    const next = registry.get(type, at.version + 1) as AnyContract;
    const step = `upcast of ${JSON.stringify(type)} v${at.version} → v${next.version}`;
    let raw: unknown;
    try {
      raw = await (at.upcast as (d: unknown) => unknown)(value);
    } catch (err) {
      return { ok: false, reason: 'upcast-failed', error: `${step} threw: ${err instanceof Error ? err.message : String(err)}` };
    }
    const checked = await check(next, raw);
    if (!checked.ok) {
      const error = 'threw' in checked ? checked.threw : `${step} returned data v${next.version} refuses: ${formatIssues(checked.issues)}`;
      return { ok: false, reason: 'upcast-failed', error, ...('issues' in checked ? { issues: checked.issues } : {}) };
    }
    value = checked.value;
    at = next;
  }
  return { ok: true, value, fromVersion: from.version, version: target.version };
}
