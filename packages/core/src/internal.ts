// For sibling Ferry packages; not part of the public API.
export { describeValue, sqlState } from './errors.js';
