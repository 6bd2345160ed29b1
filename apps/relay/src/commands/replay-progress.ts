import type { CommandContext } from '../context.js';

export type ProgressMode = 'auto' | 'bar' | 'lines' | 'none';

/** Progress on a terminal as a redrawn bar, otherwise one plain line per second. */
export class Progress {
  readonly #mode: 'bar' | 'lines' | 'none';
  readonly #ctx: CommandContext;
  readonly #total: number;
  readonly #started = Date.now();
  #lastLine = 0;

  constructor(mode: ProgressMode, total: number, ctx: CommandContext) {
    this.#mode = mode === 'auto' ? (process.stderr.isTTY ? 'bar' : 'lines') : mode;
    this.#total = total;
    this.#ctx = ctx;
  }

  update(done: number, final = false): void {
    if (this.#mode === 'none' || this.#total === 0) return;
    const now = Date.now();
    const pct = Math.floor((done / this.#total) * 100);
    const rate = Math.round(done / Math.max(0.001, (now - this.#started) / 1000));
    if (this.#mode === 'bar') {
      if (!final && now - this.#lastLine < 100) return; // redraw at most 10 times a second
      this.#lastLine = now;
      const width = 30;
      const filled = Math.round((done / this.#total) * width);
      process.stderr.write(`\r[${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ${pct}% ${done}/${this.#total} ${rate}/s`);
      if (final) process.stderr.write('\n');
      return;
    }
    if (final || now - this.#lastLine >= 1000) {
      this.#lastLine = now;
      this.#ctx.err(`replay: ${done}/${this.#total} (${pct}%) ${rate}/s`);
    }
  }
}
