import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, waitFor } from './wait.js';

/** The nats-server binary: NATS_SERVER_BIN, else the first of PATH's, /usr/sbin's, /usr/local/bin's. */
export function natsServerBin(): string {
  if (process.env.NATS_SERVER_BIN) return process.env.NATS_SERVER_BIN;
  for (const p of ['/usr/sbin/nats-server', '/usr/local/bin/nats-server', '/usr/bin/nats-server']) if (existsSync(p)) return p;
  return 'nats-server';
}

export interface NatsServerOptions {
  /** Extra configuration file text (TLS, authorization, cluster…), merged after the defaults. */
  config?: string;
  /** Client port; default a free one. */
  port?: number;
  /** Keep JetStream's store here; default a fresh temporary directory, removed by `stop()`. */
  storeDir?: string;
  /** Server name (needed in a cluster). */
  name?: string;
}

/**
 * A nats-server process of a test's own, with JetStream, on loopback. Tests
 * that stop, kill or restart NATS use this, never the machine's shared server.
 */
export class NatsServer {
  readonly port: number;
  readonly monitorPort: number;
  readonly storeDir: string;
  readonly #confPath: string;
  readonly #ownsStore: boolean;
  #proc: ChildProcess | undefined;
  #log = '';

  private constructor(port: number, monitorPort: number, storeDir: string, confPath: string, ownsStore: boolean) {
    this.port = port;
    this.monitorPort = monitorPort;
    this.storeDir = storeDir;
    this.#confPath = confPath;
    this.#ownsStore = ownsStore;
  }

  static async start(options: NatsServerOptions = {}): Promise<NatsServer> {
    const port = options.port ?? (await freePort());
    const monitorPort = await freePort();
    const ownsStore = options.storeDir === undefined;
    const storeDir = options.storeDir ?? mkdtempSync(join(tmpdir(), 'ferry-nats-'));
    const confPath = join(storeDir, 'nats.conf');
    writeFileSync(
      confPath,
      [
        `listen: "127.0.0.1:${port}"`,
        `http: "127.0.0.1:${monitorPort}"`,
        options.name ? `server_name: "${options.name}"` : '',
        `jetstream { store_dir: "${join(storeDir, 'js')}" }`,
        options.config ?? '',
      ].join('\n'),
    );
    const server = new NatsServer(port, monitorPort, storeDir, confPath, ownsStore);
    await server.restart();
    return server;
  }

  get url(): string {
    return `nats://127.0.0.1:${this.port}`;
  }

  get pid(): number | undefined {
    return this.#proc?.pid;
  }

  get running(): boolean {
    return this.#proc !== undefined && this.#proc.exitCode === null && this.#proc.signalCode === null;
  }

  /** What the server logged, for a failing test's message. */
  get log(): string {
    return this.#log;
  }

  /** Starts the process (again, on the same port and store) and waits until JetStream is healthy. */
  async restart(): Promise<void> {
    if (this.running) return;
    const proc = spawn(natsServerBin(), ['-c', this.#confPath], { stdio: ['ignore', 'pipe', 'pipe'] });
    const keep = (b: Buffer) => {
      this.#log = (this.#log + b.toString()).slice(-20_000);
    };
    proc.stdout?.on('data', keep);
    proc.stderr?.on('data', keep);
    this.#proc = proc;
    await waitFor(
      async () => {
        if (!this.running) throw new Error(`nats-server exited: ${this.#log}`);
        const res = await fetch(`http://127.0.0.1:${this.monitorPort}/healthz?js-enabled-only=true`);
        return res.ok;
      },
      { timeoutMs: 15_000, what: `nats-server on port ${this.port}` },
    );
  }

  /** Sends `signal` to the process (by pid) and waits for it to exit. */
  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    const proc = this.#proc;
    if (!proc || !this.running) return;
    const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
    proc.kill(signal);
    await exited;
  }

  /** Stops the server gracefully and removes its store unless the caller gave one. */
  async stop(): Promise<void> {
    await this.kill('SIGTERM');
    if (this.#ownsStore) rmSync(this.storeDir, { recursive: true, force: true });
  }
}
