// The chaos run's progress log: one timestamped line on stderr, from the run and its supervisor alike.
export const log = (msg: string) => process.stderr.write(`[chaos ${new Date().toISOString().slice(11, 23)}] ${msg}\n`);
