import { readFile, writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { ConfigError } from '@ferry/core';
import { Command, Option } from 'commander';
import type { CommandContext } from '../context.js';
import { buildAsyncApi } from '../contracts/asyncapi.js';
import { checkAgainst, formatReport } from '../contracts/check.js';
import { loadRegistry } from '../contracts/load-registry.js';
import { buildSnapshot, formatSnapshot, parseSnapshot } from '../contracts/snapshot.js';
import { CommandFailedError } from '../errors.js';
import { EXIT, exitWith } from '../exit-codes.js';
import { shellQuote } from '../shell-quote.js';

// `ferry contracts`: the event contracts of an application (@ferry/contracts) as a snapshot that CI
// compares every change against, and as an AsyncAPI document for the teams that consume them.

interface RegistryFlags {
  registry: string;
}

const registryOption = () =>
  new Option(
    '--registry <file>',
    'the built JavaScript module that exports the registry (export default defineContracts([...]))',
  ).makeOptionMandatory();

const REGISTRY_HELP = `
The registry module is imported as is (build TypeScript first). Its default export is the registry,
else its "contracts" export, else its one export that is a registry. A module that is missing, does
not load or exports no registry exits 2, naming the file.`;

async function writeOut(ctx: CommandContext, text: string, out: string | undefined, what: string): Promise<void> {
  if (out === undefined) {
    ctx.out(text.trimEnd());
    return;
  }
  try {
    await writeFile(resolve(process.cwd(), out), text);
  } catch (err) {
    throw new CommandFailedError(`could not write ${what} to ${out}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
  ctx.err(`wrote ${what} to ${out}`);
}

const SNAPSHOT_HELP = `
Writes every contract (type, version, subject, dataschema, description) with the JSON Schema of its
data, sorted by type and version, keys sorted: the same registry always gives the same bytes, so the
file diffs well in review. Commit it; \`ferry contracts check --against\` it in CI.

The JSON Schema is the contract's \`jsonSchema\` when defineEvent was given one, else the validator's
own Standard JSON Schema export (zod ≥ 4, arktype ≥ 2.1 have one; valibot needs jsonSchema:
toJsonSchema(schema) from @valibot/to-json-schema). A contract with neither exits 1, naming it.
${REGISTRY_HELP}

Examples:
  ferry contracts snapshot --registry dist/contracts.js --out contracts.snapshot.json
  ferry contracts snapshot --registry dist/contracts.js | jq '.contracts[].type'`;

function snapshotCommand(ctx: CommandContext): Command {
  return new Command('snapshot')
    .description('write the JSON Schema of every contract, to commit and check against')
    .addOption(registryOption())
    .addOption(new Option('--out <file>', 'write the snapshot to this file instead of stdout'))
    .addHelpText('after', SNAPSHOT_HELP)
    .action(async (flags: RegistryFlags & { out?: string }) => {
      const { registry } = await loadRegistry(flags.registry, process.cwd());
      await writeOut(ctx, formatSnapshot(buildSnapshot(registry)), flags.out, 'the contracts snapshot');
    });
}

const CHECK_HELP = `
Exit 1 when a version the snapshot has changed in a way that breaks its published events, under the
BACKWARD rule of the schema registries: data valid under the snapshot's schema must stay valid, and
keep its meaning, under the registry's. Breaking: a field removed, a type changed, a field newly
required, an enum narrowed or a const changed, additionalProperties newly false, a bound added or
tightened (minimum, maximum, length, items, multipleOf, pattern, format), a version removed, a
changed dataschema. A change it cannot prove compatible (another keyword changed, a $ref it cannot
follow) is refused too, naming the keyword. Each refusal names the type, the version, the field, the
rule and the fix: keep the version as it was and publish the new shape as a new version with an
upcaster, or, for a version never published, refresh the snapshot.

New optional fields, widened enums, looser bounds, new versions and new types pass (exit 0) with a
line saying the snapshot is behind and the command that refreshes it.
${REGISTRY_HELP} A --against file that is not a snapshot exits 2.

Examples:
  ferry contracts check --registry dist/contracts.js --against contracts.snapshot.json
  ferry contracts check --registry dist/contracts.js --against contracts.snapshot.json --json`;

function checkCommand(ctx: CommandContext): Command {
  return new Command('check')
    .description('exit 1 when a published contract changed in a breaking way (BACKWARD rule)')
    .addOption(registryOption())
    .addOption(new Option('--against <file>', 'the snapshot to compare with (ferry contracts snapshot --out)').makeOptionMandatory())
    .addOption(new Option('--json', 'print the result as JSON'))
    .addHelpText('after', CHECK_HELP)
    .action(async (flags: RegistryFlags & { against: string; json?: boolean }) => {
      const loaded = await loadRegistry(flags.registry, process.cwd());
      let text: string;
      try {
        text = await readFile(resolve(process.cwd(), flags.against), 'utf8');
      } catch (err) {
        throw new ConfigError(
          '--against',
          `--against ${JSON.stringify(flags.against)}: ${(err as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : String(err)}; write it first: ferry contracts snapshot --registry ${shellQuote(flags.registry)} --out ${shellQuote(flags.against)}`,
        );
      }
      const snapshot = parseSnapshot(text, flags.against);
      const report = checkAgainst(snapshot, buildSnapshot(loaded.registry), loaded.registry, {
        registry: flags.registry,
        against: flags.against,
      });
      if (flags.json) {
        ctx.out(JSON.stringify({ ok: report.breaking.length === 0, against: flags.against, ...report }));
      } else {
        const lines = formatReport(report, flags.against);
        for (const line of lines) (report.breaking.length > 0 ? ctx.err : ctx.out)(line);
      }
      if (report.breaking.length > 0) exitWith(EXIT.failure);
    });
}

const ASYNCAPI_HELP = `
Writes an AsyncAPI 3.0.0 document (JSON) of the contracts: a channel per subject (its address), a
message per type and version (OrderPlaced.v2) with the JSON Schema of its data as payload, and a send
operation per channel. Each message's headers schema is the CloudEvents binding Ferry publishes with:
ce-type, ce-dataschema and ce-dataversion fixed by the contract, ce-id, ce-source, ce-time,
ce-sequence, and the key in ce-partitionkey, which the message's x-ferry-partition-key names as its
partition key (AsyncAPI has no NATS message binding). Contracts without a subject share a channel per
type whose address is null (the publisher names it).
${REGISTRY_HELP}

Examples:
  ferry contracts asyncapi --registry dist/contracts.js --out asyncapi.json --title "Orders events"
  ferry contracts asyncapi --registry dist/contracts.js --api-version 2.3.0`;

function asyncapiCommand(ctx: CommandContext): Command {
  return new Command('asyncapi')
    .description('write an AsyncAPI 3.0 document of the contracts (channels, messages, CloudEvents headers)')
    .addOption(registryOption())
    .addOption(new Option('--out <file>', 'write the document to this file instead of stdout'))
    .addOption(new Option('--title <text>', "the document's info.title").default('Ferry events'))
    .addOption(new Option('--api-version <version>', "the document's info.version (the version of your events API)").default('1.0.0'))
    .addHelpText('after', ASYNCAPI_HELP)
    .action(async (flags: RegistryFlags & { out?: string; title: string; apiVersion: string }) => {
      const { registry } = await loadRegistry(flags.registry, process.cwd());
      const doc = buildAsyncApi(buildSnapshot(registry), { title: flags.title, version: flags.apiVersion });
      await writeOut(ctx, `${JSON.stringify(doc, null, 2)}\n`, flags.out, 'the AsyncAPI document');
    });
}

export function contractsCommand(ctx: CommandContext): Command {
  const cmd = new Command('contracts').description(
    'event contracts (@ferry/contracts): snapshot their JSON Schemas, check a change against the snapshot, write AsyncAPI',
  );
  for (const sub of [snapshotCommand(ctx), checkCommand(ctx), asyncapiCommand(ctx)]) {
    cmd.addCommand(sub.exitOverride().configureOutput({ writeOut: (s) => ctx.out(s.trimEnd()), writeErr: (s) => ctx.err(s.trimEnd()) }));
  }
  return cmd;
}
