/** Quotes one argument for a POSIX shell, so a printed command (a replay's resume, a skip) can be pasted as is. */
export function shellQuote(arg: string): string {
  return /^[A-Za-z0-9_.,:@%+=/-]+$/.test(arg) ? arg : `'${arg.replaceAll("'", "'\\''")}'`;
}
