import { describeValue, ValidationError, WIRE_HEADERS } from '@ferry/core';
import type { AnyContract } from './contract.js';
import { ContractValidationError } from './errors.js';
import type { ContractRegistry } from './registry.js';
import { type CheckResult, checkData } from './validate.js';

/** What the publisher adds to an event its contract accepted. */
export interface PublishStamp {
  readonly contract: AnyContract;
  /** The contract's default subject (the event's own `subject` wins). */
  readonly subject: string | undefined;
  /** `ce-dataschema` and `ce-dataversion`, for the outbox row's headers. */
  readonly headers: Readonly<Record<string, string>>;
}

/** The fields of a publish that the contract reads. */
export interface ContractedEvent {
  readonly type?: unknown;
  readonly data?: unknown;
  readonly contentType?: unknown;
  readonly contractVersion?: unknown;
}

/** `application/json`, `application/cloudevents+json; charset=utf-8`, …: what a JSON validator can read. */
const JSON_MEDIA_TYPE = /^application\/([\w.-]+\+)?json\s*(;|$)/i;

const stamps = new WeakMap<AnyContract, PublishStamp>();

function stampOf(registry: ContractRegistry, contract: AnyContract): PublishStamp {
  let stamp = stamps.get(contract);
  if (!stamp) {
    stamp = Object.freeze({
      contract,
      subject: contract.subject,
      headers: Object.freeze({
        [WIRE_HEADERS.dataschema]: registry.dataschema(contract),
        [WIRE_HEADERS.dataversion]: String(contract.version),
      }),
    });
    stamps.set(contract, stamp);
  }
  return stamp;
}

/** The contract `event` is published under: its `contractVersion`, or its type's newest. Throws a `ValidationError` naming the field. */
function contractOf(registry: ContractRegistry, event: ContractedEvent, field: string): AnyContract {
  const type = event.type;
  const versions = typeof type === 'string' ? registry.versions(type) : [];
  if (versions.length === 0) {
    throw new ValidationError(
      `${field}.type`,
      `${field}.type ${describeValue(type)} has no contract in this publisher's registry (it has ${
        registry
          .types()
          .map((t) => JSON.stringify(t))
          .join(', ') || 'none'
      }): add defineEvent({ type: ${JSON.stringify(String(type))}, version: 1, schema }) to the registry, or publish it with a publisher created without contracts`,
    );
  }
  if (event.contractVersion === undefined) return versions[versions.length - 1] as AnyContract;
  const v = event.contractVersion;
  const contract = typeof v === 'number' && Number.isInteger(v) ? versions[v - 1] : undefined;
  if (!contract) {
    throw new ValidationError(
      `${field}.contractVersion`,
      `${field}.contractVersion ${describeValue(v)}: ${JSON.stringify(type)} has versions 1 to ${versions.length}; pass one of them, or leave contractVersion out for the newest (v${versions.length})`,
    );
  }
  return contract;
}

/**
 * Check one event against its contract before the publisher writes it:
 * the type must have a contract, the data must be JSON and pass the
 * contract's validator. Returns the stamp for the row, or a promise of it
 * when the validator is asynchronous. Throws (or rejects with) a
 * `ValidationError`: a `ContractValidationError` with the validator's issues,
 * or a `ContractValidatorError` when the validator threw.
 */
export function checkPublish(registry: ContractRegistry, event: ContractedEvent, field: string): PublishStamp | Promise<PublishStamp> {
  const contract = contractOf(registry, event, field);
  const data = event.data;
  if (
    (event.contentType !== undefined && (typeof event.contentType !== 'string' || !JSON_MEDIA_TYPE.test(event.contentType))) ||
    data instanceof ArrayBuffer ||
    ArrayBuffer.isView(data)
  ) {
    throw new ValidationError(
      `${field}.data`,
      `${field}: ${JSON.stringify(contract.type)} v${contract.version} has a contract, so its data is JSON checked by the contract's validator; got ${ArrayBuffer.isView(data) || data instanceof ArrayBuffer ? 'bytes' : `contentType ${describeValue(event.contentType)}`}. Pass the value itself, or publish bytes with a publisher created without contracts`,
    );
  }
  const settle = (result: CheckResult): PublishStamp => {
    if (!result.ok) throw new ContractValidationError(`${field}.data`, contract.type, contract.version, result.issues);
    return stampOf(registry, contract);
  };
  const result = checkData(contract, data);
  return result instanceof Promise ? result.then(settle) : settle(result);
}
