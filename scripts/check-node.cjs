// Stops `npm test` and `npm run demo` at once, with one line, on a Node.js too old
// for Ferry. Without it Node 20 built, then failed with a test-runner glob error
// that never mentioned Node (issue 16). Written in CommonJS and old syntax so
// that it runs, and says so, on any Node.
// Usage: node scripts/check-node.cjs [version]   (the argument is for its test)
'use strict';
var REQUIRED = [22, 12];
var version = process.argv[2] || process.versions.node;
var parts = String(version).replace(/^v/, '').split('.');
var major = Number(parts[0]);
var minor = Number(parts[1]);
var ok = major > REQUIRED[0] || (major === REQUIRED[0] && minor >= REQUIRED[1]);
if (!ok) {
  process.stderr.write(
    'ferry: Node.js ' +
      version +
      ' is too old: Ferry needs Node.js >= ' +
      REQUIRED.join('.') +
      ' (run `nvm install` in this folder, which reads .nvmrc, or get Node 22 LTS from https://nodejs.org)\n',
  );
  process.exit(1);
}
