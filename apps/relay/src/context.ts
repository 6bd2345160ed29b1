/** What a command needs from its process: output streams and the environment. Tests pass their own. */
export interface CommandContext {
  out(line: string): void;
  err(line: string): void;
  env: NodeJS.ProcessEnv;
}
