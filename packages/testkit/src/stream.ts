import { type JetStreamManager, jetstreamManager, RetentionPolicy, StorageType } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { uniqueName } from './wait.js';

/** The machine's shared nats-server with JetStream. Override with FERRY_TEST_NATS_URL. */
export function natsUrl(): string {
  return process.env.FERRY_TEST_NATS_URL ?? 'nats://127.0.0.1:4222';
}

export interface TestStream {
  readonly nc: NatsConnection;
  readonly jsm: JetStreamManager;
  /** Stream name, unique to this test. */
  readonly name: string;
  /** Subject prefix the stream covers as `<prefix>.>`. */
  readonly prefix: string;
  /** Deletes the stream and closes the connection. */
  close(): Promise<void>;
}

/**
 * A connection to NATS and a file-less (memory) stream of this test's own,
 * covering `<prefix>.>`, with a duplicate window of `duplicateWindowMs`.
 */
export async function createTestStream(
  options: { servers?: string; prefix?: string; duplicateWindowMs?: number; storage?: 'memory' | 'file'; replicas?: number } = {},
): Promise<TestStream> {
  const nc = await connect({ servers: options.servers ?? natsUrl(), name: 'ferry-test' });
  const jsm = await jetstreamManager(nc);
  const name = uniqueName(options.prefix ?? 'T').toUpperCase();
  const prefix = name.toLowerCase();
  await jsm.streams.add({
    name,
    subjects: [`${prefix}.>`],
    storage: options.storage === 'file' ? StorageType.File : StorageType.Memory,
    retention: RetentionPolicy.Limits,
    duplicate_window: (options.duplicateWindowMs ?? 120_000) * 1_000_000,
    num_replicas: options.replicas ?? 1,
  });
  let closed = false;
  return {
    nc,
    jsm,
    name,
    prefix,
    async close() {
      if (closed) return;
      closed = true;
      try {
        await jsm.streams.delete(name);
      } catch {
        // already gone (a test may delete it itself)
      }
      await nc.close();
    },
  };
}
