/**
 * Loaded into a relay process with `node --import` by bench/scenarios/relay-writes.ts:
 * counts the writes to each socket by the remote port (one `socket.write` is one
 * write request to the kernel unless Node queues it behind another), and at exit
 * writes them as JSON to the file `FERRY_BENCH_WRITES_FILE` names.
 */
import { writeFileSync } from 'node:fs';
import net from 'node:net';

const file = process.env.FERRY_BENCH_WRITES_FILE;
const counts = new Map<number, { writes: number; bytes: number }>();
const write = net.Socket.prototype.write;
net.Socket.prototype.write = function (this: net.Socket, chunk: unknown, ...rest: unknown[]) {
  const port = this.remotePort ?? 0;
  const c = counts.get(port) ?? { writes: 0, bytes: 0 };
  c.writes++;
  c.bytes += typeof chunk === 'string' ? Buffer.byteLength(chunk) : ((chunk as Uint8Array | undefined)?.length ?? 0);
  counts.set(port, c);
  return (write as (...a: unknown[]) => boolean).call(this, chunk, ...rest);
} as typeof net.Socket.prototype.write;
process.on('exit', () => {
  if (file) writeFileSync(file, JSON.stringify(Object.fromEntries(counts)));
});
