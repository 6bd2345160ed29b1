/**
 * Response headers that carry the caller's identity or session: a stored
 * answer never keeps them, so a replay cannot hand out a session cookie or an
 * authentication nonce, even to the same caller on another device.
 * `Set-Cookie`/`Set-Cookie2` (RFC 6265, RFC 2965) set session credentials;
 * `Authentication-Info`/`Proxy-Authentication-Info` (RFC 9110 11.6.3, 11.7.3)
 * carry per-session nonces; `Authorization`/`Proxy-Authorization` are request
 * credentials that have no business in a response. `WWW-Authenticate` is a
 * challenge, not an identity, and a replayed 401 needs it: it is kept.
 * Lower case; compared case-insensitively.
 */
export const IDENTITY_HEADERS: ReadonlySet<string> = new Set([
  'set-cookie',
  'set-cookie2',
  'authentication-info',
  'proxy-authentication-info',
  'authorization',
  'proxy-authorization',
]);

/** The headers without `IDENTITY_HEADERS`, as a new object built from a Map (no prototype surprises). */
export function withoutIdentityHeaders(headers: Readonly<Record<string, string>>): Record<string, string> {
  const kept = new Map<string, string>();
  for (const [name, value] of Object.entries(headers)) {
    if (!IDENTITY_HEADERS.has(name.toLowerCase())) kept.set(name, value);
  }
  return Object.fromEntries(kept);
}
