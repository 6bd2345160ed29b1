// Who may name a loopback-bound server: the DNS rebinding defence of `ferry console` and of the
// relay's HTTP port when it serves the console (`ferry relay --console`). One rule for both, here.
//
// A page on http://127.0.0.1.rebind.evil.example:8080/ whose name the attacker's DNS later points at
// 127.0.0.1 reaches a loopback console from the operator's browser as a same-origin page; only the
// Host header still carries the attacker's name. So a loopback-bound server answers only a Host that
// cannot be anyone else's name: a loopback IP literal or `localhost`, each in the one spelling a
// browser sends (its URL parser canonicalizes 0x7f.1, 2130706433 and 127.1 to 127.0.0.1, and
// lowercases names), with the port the connection arrived on.

/** One IPv4 octet in decimal with no leading zero: the only form a browser sends (0177 is octal to some parsers, decimal to others). */
const OCTET = '(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])';
/** 127.0.0.0/8, strict dotted quad: no hex, octal, leading zeros, short forms (127.1) or a trailing dot. */
const LOOPBACK_V4 = new RegExp(`^127\\.${OCTET}\\.${OCTET}\\.${OCTET}$`);
/**
 * `localhost` in any ASCII case: DNS names are case-insensitive (RFC 4343), so LOCALHOST is the same
 * name, and no browser sends it (URLs lowercase their host). Not `localhost.`: a trailing dot makes it
 * an absolute name that some resolvers send to DNS, where RFC 6761's loopback answer is only a SHOULD.
 * The `i` flag without `u` folds ASCII only: the Kelvin sign K (U+212A) is not a k here.
 */
const LOCALHOST = /^localhost$/i;

/**
 * Whether a listen address keeps the server on this host (which opens the console's pages without
 * credentials and turns the Host check on): 127.x.y.z in strict dotted-quad form, `::1` (bracketed
 * or not) or `localhost`. Anything else, a host name that happens to resolve to 127.0.1.1 included,
 * counts as reachable from other hosts and needs credentials.
 */
export function isLoopbackAddress(address: string): boolean {
  return LOOPBACK_V4.test(address) || address === '::1' || address === '[::1]' || LOCALHOST.test(address);
}

/**
 * Why `host` (a request's Host header) does not name a loopback-bound server listening on `port`, or
 * `undefined` when it does: the name is a loopback IPv4 literal, `[::1]` or `localhost` (see above),
 * followed by `:port`. The port may be left out only on port 80, where browsers leave it out.
 * A missing Host, a wrong port, any other name or spelling: a reason naming the value and the fix,
 * for a 421 Misdirected Request.
 */
export function misdirectedHost(host: string | undefined, port: number): string | undefined {
  const advice = `on a loopback bind it answers only to 127.0.0.1:${port}, [::1]:${port} or localhost:${port} (DNS rebinding defence): open http://127.0.0.1:${port}/, and keep the port the same through an SSH tunnel (ssh -L ${port}:127.0.0.1:${port})`;
  if (host === undefined || host === '') return `the request has no Host header: ${advice}`;
  const shown = JSON.stringify(host.length > 80 ? `${host.slice(0, 80)}…` : host);
  const m = /^(\[[^\]]*\]|[^:[\]]*)(?::([0-9]*))?$/.exec(host);
  const name = m?.[1] ?? '';
  const givenPort = m?.[2];
  if (!m || !(LOOPBACK_V4.test(name) || name === '[::1]' || LOCALHOST.test(name)))
    return `Host ${shown} does not name this server: ${advice}`;
  const portOk = givenPort === undefined ? port === 80 : givenPort === String(port);
  if (!portOk) return `Host ${shown} names another port than this server's (${port}): ${advice}`;
  return undefined;
}
