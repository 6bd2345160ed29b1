import { describeValue } from '@ferry/core';

/** The longest operator name the console records. */
export const OPERATOR_NAME_MAX = 64;

/**
 * An operator's name as typed at the console's login or given with `--operator`: 1-64 letters,
 * digits, spaces and `. _ @ -`, trimmed. It is a claim, not an identity: anyone holding a shared
 * token may type any name. Returns the name, or throws an Error whose message names the value and the rule.
 */
export function checkOperatorName(value: string): string {
  const name = value.trim();
  if (name.length === 0 || name.length > OPERATOR_NAME_MAX || !/^[\p{L}\p{N} ._@-]+$/u.test(name)) {
    throw new Error(
      `${describeValue(value, 40)} is not an operator name: 1-${OPERATOR_NAME_MAX} letters, digits, spaces or . _ @ -, e.g. alice or ops-oncall`,
    );
  }
  return name;
}

/** Who the audit trail records for a shared token: the name claimed with it, or just `token`. */
export function tokenActor(name: string | undefined): string {
  return name === undefined ? 'token' : `${name} (token)`;
}
