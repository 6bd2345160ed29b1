import { createServer, type Server, type Socket, connect as tcpConnect } from 'node:net';

/** What the proxy does with the connections through it. */
export type ProxyMode = 'pass' | 'blackhole' | 'stall';

/**
 * A TCP proxy a test owns, in front of a real server (PostgreSQL, NATS), to
 * cut one client off without touching the shared server:
 *
 * - `blackhole()`: bytes in either direction are dropped, nothing is closed
 *   and nothing is reset, as in a partition: each side sees a silent peer.
 *   New connections are accepted and go nowhere.
 * - `halfOpen()`: the client's side of every connection is destroyed while
 *   the server's side stays open and silent, as when a client's host
 *   vanished: the server keeps the orphaned session until its own timeouts
 *   notice. New connections pass again.
 * - `stall()`: the proxy stops reading what the clients send, as a server
 *   that stopped reading: nothing is dropped, the kernel's buffers fill,
 *   and a client's writes are taken only in part, then not at all.
 * - `heal()`: new and surviving connections pass again.
 */
export class TcpProxy {
  readonly port: number;
  readonly #server: Server;
  readonly #pairs = new Set<{ client: Socket; upstream: Socket }>();
  /** Server-side sockets left open by halfOpen(), destroyed by close(). */
  readonly #orphans = new Set<Socket>();
  #mode: ProxyMode = 'pass';
  #tap: ((chunk: Buffer) => void) | undefined;

  private constructor(server: Server, port: number) {
    this.#server = server;
    this.port = port;
  }

  /** Listens on a free loopback port and forwards to `host:port`. */
  static async start(target: { host: string; port: number }): Promise<TcpProxy> {
    let proxy: TcpProxy | undefined;
    const server = createServer((client) => proxy?.accept(client, target));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const address = server.address();
    if (address === null || typeof address === 'string') throw new Error('the proxy has no TCP address');
    proxy = new TcpProxy(server, address.port);
    return proxy;
  }

  get mode(): ProxyMode {
    return this.#mode;
  }

  /** @internal Wires one accepted connection to the target. */
  accept(client: Socket, target: { host: string; port: number }): void {
    const upstream = tcpConnect(target.port, target.host);
    const pair = { client, upstream };
    this.#pairs.add(pair);
    // Through a blackhole, a close on one side is not seen on the other either (a FIN is a packet):
    // the other side stays open and silent, as in a real partition, until close().
    const ended = (side: Socket, other: Socket) => () => {
      this.#pairs.delete(pair);
      side.destroy();
      if (this.#mode === 'blackhole' || this.#orphans.has(other)) {
        this.#orphans.add(other);
        other.removeAllListeners('data');
        other.on('error', () => {});
      } else other.destroy();
    };
    if (this.#mode === 'stall') client.pause();
    client.on('data', (b) => {
      if (this.#mode === 'blackhole') return;
      this.#tap?.(b);
      upstream.write(b);
    });
    upstream.on('data', (b) => {
      if (this.#mode !== 'blackhole') client.write(b);
    });
    client.on('error', ended(client, upstream)).on('close', ended(client, upstream));
    upstream.on('error', ended(upstream, client)).on('close', ended(upstream, client));
  }

  /** Sees every chunk the clients send that passes to the server (a test's record of who sent what, when). */
  tap(fn: (chunk: Buffer) => void): void {
    this.#tap = fn;
  }

  /** Drops every byte both ways; closes nothing. */
  blackhole(): void {
    this.#mode = 'blackhole';
  }

  /** Destroys the client side of every open connection and leaves the server side open and silent; new connections pass. */
  halfOpen(): void {
    for (const pair of this.#pairs) {
      this.#orphans.add(pair.upstream);
      pair.upstream.removeAllListeners('data');
      pair.upstream.on('error', () => {});
      pair.client.destroy();
    }
    this.#pairs.clear();
    this.#mode = 'pass';
  }

  /** Stops reading from the clients (their bytes wait in the kernel's buffers); what the server sends still passes. */
  stall(): void {
    this.#mode = 'stall';
    for (const { client } of this.#pairs) client.pause();
  }

  /** Lets bytes through again (and reads what a stall left waiting). */
  heal(): void {
    this.#mode = 'pass';
    for (const { client } of this.#pairs) client.resume();
  }

  async close(): Promise<void> {
    for (const { client, upstream } of this.#pairs) {
      client.destroy();
      upstream.destroy();
    }
    for (const s of this.#orphans) s.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}
