import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isLoopbackAddress, misdirectedHost } from './loopback-host.js';

// The DNS rebinding rule of a loopback-bound console (and of the relay's HTTP port serving it): the
// Host must be a loopback IP literal or localhost, in a browser's canonical spelling, with the port.

const PORT = 8123;

test('loopback host - a loopback IP literal or localhost with the port is answered', () => {
  for (const host of ['127.0.0.1', '127.0.0.2', '127.255.255.254', '127.10.200.3', '[::1]', 'localhost', 'LOCALHOST', 'LocalHost'])
    assert.equal(misdirectedHost(`${host}:${PORT}`, PORT), undefined, host);
});

test('loopback host - rebinding names, other spellings of 127.0.0.1 and localhost. are refused', () => {
  const refused = [
    // DNS names the attacker controls (the issue's, and their like).
    '127.0.0.1.rebind.evil.example',
    '127.evil.example',
    'localhost.evil.example',
    'evil.localhost',
    'attacker.example',
    '127.0.0.1.nip.io',
    // A trailing dot: an absolute name, resolved outside RFC 6761's guarantee.
    'localhost.',
    '127.0.0.1.',
    // Non-canonical IPv4: a browser never sends these (its URL parser rewrites them to 127.0.0.1);
    // other parsers read some of them differently (0177 is octal to inet_aton, decimal to others).
    '0x7f.1',
    '0x7f.0.0.1',
    '0x7f000001',
    '2130706433',
    '127.1',
    '127.0.1',
    '0177.0.0.1',
    '127.000.000.001',
    '127.0.0.01',
    '127.0.0.256',
    '127.0.0.1.1',
    // Other IPv6 spellings of ::1, a mapped IPv4, an unbracketed ::1.
    '[0:0:0:0:0:0:0:1]',
    '[::ffff:127.0.0.1]',
    '[::1%lo]',
    '::1',
    // Not loopback at all, and look-alikes.
    '0.0.0.0',
    '10.0.0.1',
    '128.0.0.1',
    'localhost\u212a', // localhos + Kelvin sign, which some case foldings turn into k
    'locaLHOST ',
    ' localhost',
    'local host',
  ];
  for (const name of refused) {
    const why = misdirectedHost(`${name}:${PORT}`, PORT);
    assert.ok(why !== undefined, `${JSON.stringify(name)} must be refused`);
    assert.match(why, /does not name this server|another port/, name);
    assert.match(why, /open http:\/\/127\.0\.0\.1:8123\//, 'the message says what to open instead');
  }
});

test('loopback host - a missing Host, a missing or wrong port are refused (a port can be left out only on 80)', () => {
  assert.match(misdirectedHost(undefined, PORT) ?? '', /no Host header/);
  assert.match(misdirectedHost('', PORT) ?? '', /no Host header/);
  for (const host of [
    '127.0.0.1',
    'localhost',
    '[::1]',
    '127.0.0.1:8124',
    'localhost:80',
    '[::1]:1',
    '127.0.0.1:',
    '127.0.0.1:08123',
    'localhost:8123:8123',
  ])
    assert.ok(misdirectedHost(host, PORT) !== undefined, `${host} must be refused on port ${PORT}`);
  assert.match(misdirectedHost('127.0.0.1:8124', PORT) ?? '', /another port than this server's \(8123\)/);
  assert.equal(misdirectedHost('127.0.0.1', 80), undefined, 'a browser leaves :80 out');
  assert.equal(misdirectedHost('localhost:80', 80), undefined);
});

test('loopback host - a listen address is loopback only as a strict literal or localhost', () => {
  for (const a of ['127.0.0.1', '127.0.0.5', '::1', '[::1]', 'localhost']) assert.equal(isLoopbackAddress(a), true, a);
  for (const a of ['0.0.0.0', '::', '127.1', '127.evil.example', 'localhost.evil.example', '10.1.2.3', 'myhost'])
    assert.equal(isLoopbackAddress(a), false, a);
});
