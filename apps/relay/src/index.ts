export { buildProgram, main } from './cli.js';
export type { CommandContext } from './context.js';
export { EXIT } from './exit-codes.js';
