// For sibling Ferry packages; not part of the public API.
export { describeValue, sqlState } from './errors.js';
export {
  creationParent,
  failSpan,
  MESSAGING_SYSTEM,
  type Otel,
  otel,
  SPAN_ATTRIBUTES,
  spanContextFromHeaders,
  traceHeaders,
} from './otel.js';
