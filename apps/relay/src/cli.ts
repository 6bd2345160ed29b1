import { FERRY_RELEASE, isConfigError, isMigrationError, isValidationError, RELAY_PROTOCOL } from '@ferry/core';
import { Command, CommanderError } from 'commander';
import { consoleCommand } from './commands/console.js';
import { contractsCommand } from './commands/contracts.js';
import { dlqCommand } from './commands/dlq.js';
import { doctorCommand } from './commands/doctor.js';
import { inboxCommand } from './commands/inbox.js';
import { migrateCommand } from './commands/migrate.js';
import { relayCommand } from './commands/relay.js';
import { replayCommand } from './commands/replay.js';
import { statusCommand } from './commands/status.js';
import { streamsCommand } from './commands/streams.js';
import { verifyCommand } from './commands/verify.js';
import type { CommandContext } from './context.js';
import { EXIT } from './exit-codes.js';
import { credentialFlagsOf, secretsOf, textRedactor } from './redact.js';

const EXIT_HELP = `
Exit codes:
  0  success
  1  runtime failure (a server unreachable, a statement failed)
  2  bad usage: an unknown or invalid option; nothing was done
  3  migration refused or failed (e.g. the database is newer than this Ferry), the
     schema admits only newer relays (ferry relay: its relay floor), or the schema
     holds tables Ferry did not create (another application's migrations/outbox)

Environment:
  FERRY_DATABASE_URL (then DATABASE_URL), FERRY_SCHEMA and the FERRY_* variables
  each command's --help lists. A flag wins over its variable.`;

export function buildProgram(ctx: CommandContext): Command {
  const program = new Command('ferry')
    .description('Ferry: transactional outbox and inbox for PostgreSQL and NATS JetStream')
    .version(`${FERRY_RELEASE} (relay protocol ${RELAY_PROTOCOL})`, '-V, --version', 'print the Ferry release and its relay protocol')
    .showHelpAfterError('(run with --help for usage)')
    .addHelpText('after', EXIT_HELP)
    .configureOutput({ writeOut: (s) => ctx.out(s.trimEnd()), writeErr: (s) => ctx.err(s.trimEnd()) })
    .exitOverride();
  program.addCommand(migrateCommand(ctx));
  program.addCommand(relayCommand(ctx));
  program.addCommand(dlqCommand(ctx));
  program.addCommand(inboxCommand(ctx));
  program.addCommand(statusCommand(ctx));
  program.addCommand(streamsCommand(ctx));
  program.addCommand(replayCommand(ctx));
  program.addCommand(doctorCommand(ctx));
  program.addCommand(verifyCommand(ctx));
  program.addCommand(consoleCommand(ctx));
  program.addCommand(contractsCommand(ctx));
  for (const cmd of program.commands)
    cmd.exitOverride().configureOutput({ writeOut: (s) => ctx.out(s.trimEnd()), writeErr: (s) => ctx.err(s.trimEnd()) });
  return program;
}

/**
 * A raw socket error says `connect ECONNREFUSED 127.0.0.1:5999` and not which server. nats.js wraps its
 * own, so a bare one here comes from node-postgres: say so, and where its URL comes from.
 */
function describeConnectError(err: unknown): string | undefined {
  const e = err as NodeJS.ErrnoException & { address?: string; port?: number; hostname?: string };
  if (e?.syscall !== 'connect' && e?.syscall !== 'getaddrinfo') return undefined;
  const where = e.address !== undefined ? `${e.address}:${e.port}` : (e.hostname ?? 'its host');
  return `PostgreSQL at ${where} is unreachable (${e.code}): is it running, and are --database-url / FERRY_DATABASE_URL right?`;
}

/** Runs the CLI and returns the exit code; never throws. */
export async function main(
  argv: string[],
  ctx: CommandContext = {
    out: (l) => process.stdout.write(`${l}\n`),
    err: (l) => process.stderr.write(`${l}\n`),
    env: process.env,
  },
): Promise<number> {
  // Every line any command prints passes the redactor: a credential given in a flag, a variable, a
  // URL (even one no parser accepts) or a creds file never reaches the output (commander's own
  // "argument '…' is invalid" lines included).
  const redact = textRedactor(secretsOf(argv, ctx.env));
  const raw = ctx;
  const safe: CommandContext = { ...raw, out: (l) => raw.out(redact(l)), err: (l) => raw.err(redact(l)) };
  const program = buildProgram(safe);
  const onArgv = credentialFlagsOf(argv);
  if (onArgv.length > 0) {
    // Once, on stderr, without the values: stdout may be --json that a script parses.
    safe.err(
      `ferry: warning: ${onArgv.map((c) => c.flag).join(', ')} on the command line: every local user can read ${onArgv.length > 1 ? 'them' : 'it'} (ps, /proc/<pid>/cmdline); set ${onArgv.map((c) => c.variable).join(', ')} instead, or --nats-creds for a file`,
    );
  }
  if (argv.length <= 2) {
    safe.out(program.helpInformation().trimEnd());
    return EXIT.usage;
  }
  try {
    await program.parseAsync(argv);
    return EXIT.ok;
  } catch (err) {
    if (err instanceof CommanderError) {
      if (err.code === 'ferry.exit') return err.exitCode; // a command's own exit code (exit-codes.ts exitWith)
      // `ferry dlq` with no subcommand prints help as an error (commander.help, exit code 1): that is bad usage, like `ferry` alone.
      if (err.code === 'commander.help') return err.exitCode === 0 ? EXIT.ok : EXIT.usage;
      if (err.code === 'commander.helpDisplayed' || err.code === 'commander.version') return EXIT.ok;
      return EXIT.usage;
    }
    const message = err instanceof Error ? err.message : String(err);
    if (isConfigError(err) || isValidationError(err)) {
      safe.err(`ferry: ${message}`);
      return EXIT.usage;
    }
    if (isMigrationError(err)) {
      safe.err(`ferry: ${message}`);
      return EXIT.migration;
    }
    safe.err(`ferry: ${describeConnectError(err) ?? message.split('\n')[0]}`);
    return EXIT.failure;
  }
}
