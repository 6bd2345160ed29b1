/**
 * Event contracts: each event type at each version has a Standard Schema
 * validator (zod, valibot, arktype, …), versions run 1..n with an upcaster
 * between each, and a registry groups them. The publisher checks `data`
 * before it writes and stamps the contract on the event; the inbox checks it
 * again, upcasts older versions and parks what it cannot apply.
 * See docs/contracts.md.
 */

export { type ConsumedData, type ContractParkReason, consumeData, publishedContract } from './consume.js';
export {
  type AnyContract,
  type AnySchema,
  type ContractInput,
  type ContractOutput,
  defineEvent,
  type EventContract,
  type EventContractInput,
  MAX_CONTRACT_VERSION,
} from './contract.js';
export {
  type ContractIssue,
  ContractValidationError,
  ContractValidatorError,
  formatIssues,
  isContractValidationError,
  isContractValidatorError,
} from './errors.js';
export { type ContractedEvent, checkPublish, type PublishStamp } from './publish.js';
export {
  type ContractEventMap,
  ContractRegistry,
  type ContractsOptions,
  type DataschemaTemplate,
  DEFAULT_DATASCHEMA,
  defineContracts,
  isContractRegistry,
  type Latest,
  type PublishData,
} from './registry.js';
export { type CheckResult, checkData, formatPath } from './validate.js';
