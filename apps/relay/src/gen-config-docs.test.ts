import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { CONFIGURATION_DOC, configurationReference } from './gen-config-docs.js';

test('docs - docs/configuration.md is the reference generated from the option definitions (run npm run docs:config)', () => {
  const committed = readFileSync(CONFIGURATION_DOC, 'utf8');
  assert.ok(committed === configurationReference(), 'docs/configuration.md is stale: run `npm run docs:config` and commit it');
});

test('docs - the configuration reference covers every command with its flags and variables', () => {
  const doc = configurationReference();
  for (const heading of [
    'ferry relay',
    'ferry status',
    'ferry replay',
    'ferry doctor',
    'ferry verify',
    'ferry migrate',
    'ferry dlq list',
  ]) {
    assert.ok(doc.includes(`## \`${heading}\``), `a section for ${heading}`);
  }
  for (const s of [
    '`--max-attempts <n>`',
    '`FERRY_MAX_ATTEMPTS`',
    '`25`',
    '`FERRY_NATS_URL`',
    '`nats://127.0.0.1:4222`',
    '`--retention <duration>`',
  ]) {
    assert.ok(doc.includes(s), `mentions ${s}`);
  }
});
