import { createInterface } from 'node:readline/promises';
import { ConfigError } from '@ferry/core';

/**
 * Asks a yes/no question on the terminal for a destructive or re-sending
 * command. Without a terminal (a script, CI, a pipe) it refuses: the command
 * needs `--yes` there, so nothing destructive happens because nobody could say no.
 */
export async function confirm(question: string): Promise<boolean> {
  if (!process.stdin.isTTY || !process.stderr.isTTY) {
    throw new ConfigError('--yes', `${question}: pass --yes to confirm (there is no terminal to ask on)`);
  }
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  try {
    return /^y(es)?$/i.test((await rl.question(`${question}? [y/N] `)).trim());
  } finally {
    rl.close();
  }
}
