import { canonicalMIMEHeaderKey, type MsgHdrs, MsgHdrsImpl } from '@nats-io/transport-node';

/** A header name nats.js accepts as it is: printable ASCII but ':' (`canonicalMIMEHeaderKey`'s rule), or empty. */
const VALID_NAME = /^[!-9;-~]*$/;
/** Names found valid already (the ten CloudEvents ones on every message, and users' own), up to a bound. */
const validNames = new Set<string>();
const MAX_VALID_NAMES = 1024;

/**
 * `encodeEvent`'s header pairs as a nats.js `MsgHdrs`: the same map, so the
 * same bytes on the wire, as `headers()` with `append(name, value)` for each
 * pair, and the same errors (nats.js's own) for a name or value it refuses:
 * a character outside printable ASCII or a ':' in a name, CR or LF in a value.
 * Values are trimmed, as `append` trims them.
 *
 * Without `append`'s work per call (5% of the relay's CPU in a profile of a
 * drain at 1,000 keys, before the garbage it left): it lists every name given
 * so far to look for this one, rebuilds the name character by character to
 * check it, and creates a regular expression for the value.
 */
export function natsHeaders(pairs: ReadonlyArray<readonly [string, string]>): MsgHdrs {
  const h = new MsgHdrsImpl();
  for (const [name, value] of pairs) {
    if (!validNames.has(name)) {
      if (!VALID_NAME.test(name)) canonicalMIMEHeaderKey(name); // throws nats.js's error for the character
      if (validNames.size < MAX_VALID_NAMES) validNames.add(name);
    }
    if (value.includes('\r') || value.includes('\n')) MsgHdrsImpl.validHeaderValue(value); // throws nats.js's error
    const trimmed = value.trim();
    const values = h.headers.get(name);
    if (values) values.push(trimmed);
    else h.headers.set(name, [trimmed]);
  }
  return h;
}
