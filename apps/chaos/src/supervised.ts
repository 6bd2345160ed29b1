// One process of the chaos run, supervised: restarted whenever it exits until the run stops, killed
// or paused on the fault schedule, its output kept for the report.
import { type ChildProcess, spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { log } from './log.js';
import type { Target } from './plan.js';

/** One supervised child process: restarted whenever it exits, until the run stops. */
export class Supervised {
  readonly name: Target;
  readonly #command: () => string[];
  #proc: ChildProcess | undefined;
  #stopping = false;
  #held = false;
  #out = '';
  /** Relay instance ids seen in the log (their PostgreSQL application_name). */
  readonly instances = new Set<string>();
  unexpectedExits = 0;
  readonly reports = new Map<string, number>();

  constructor(name: Target, command: () => string[]) {
    this.name = name;
    this.#command = command;
  }

  get tail(): string {
    return this.#out.slice(-3000);
  }

  start(): void {
    const proc = spawn(process.execPath, this.#command(), { stdio: ['ignore', 'pipe', 'pipe'] });
    this.#proc = proc;
    let partial = '';
    proc.stdout?.on('data', (b: Buffer) => {
      const text = b.toString();
      this.#out = (this.#out + text).slice(-20_000);
      partial += text;
      const lines = partial.split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) {
        const inst = /"instance":"([0-9a-f]{8})"/.exec(line);
        if (inst?.[1]) this.instances.add(inst[1]);
        const kind = /^\{"kind":"([a-z-]+)"/.exec(line)?.[1];
        if (kind) this.reports.set(kind, (this.reports.get(kind) ?? 0) + 1);
      }
    });
    proc.stderr?.on('data', (b: Buffer) => {
      this.#out = (this.#out + b.toString()).slice(-20_000);
    });
    proc.once('exit', (code, signal) => {
      if (this.#stopping || this.#held) return;
      this.unexpectedExits++;
      log(`${this.name} exited on its own (code ${code}, signal ${signal}); restarting. Its last output:\n${this.#out.slice(-2500)}`);
      setTimeout(() => {
        if (!this.#stopping && !this.#held) this.start();
      }, 500);
    });
  }

  /** SIGSTOP, frozen for `pauseMs` (sockets open, nothing answered), then SIGCONT: a VM pause, a long GC. */
  async pause(pauseMs: number): Promise<void> {
    const proc = this.#proc;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    proc.kill('SIGSTOP');
    await sleep(pauseMs);
    proc.kill('SIGCONT');
  }

  /** SIGKILL, stay down `downMs`, start again. */
  async kill(downMs: number): Promise<void> {
    const proc = this.#proc;
    this.#held = true;
    if (proc && proc.exitCode === null && proc.signalCode === null) {
      const exited = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGKILL');
      await exited;
    }
    await sleep(downMs);
    this.#held = false;
    if (!this.#stopping) this.start();
  }

  async stop(): Promise<void> {
    this.#stopping = true;
    const proc = this.#proc;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise((r) => proc.once('exit', r));
    proc.kill('SIGTERM');
    const timer = setTimeout(() => proc.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  }
}
