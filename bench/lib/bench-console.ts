/**
 * A console as `ferry console` serves one, for the console benchmarks: its
 * own pools (4 page connections with the CLI's 2 s statement_timeout, 2 for
 * the long reads with 30 s, application_name ferry-console), on a free
 * loopback port, with the benchmarks' token. `close()` ends both.
 */
import { type ConsoleServer, startConsole } from '@ferry/relay';
import pg from 'pg';

export const BENCH_CONSOLE_TOKEN = 'bench-console-token-0123456789';

export async function serveBenchConsole(databaseUrl: string, schema: string, refreshMs = 5000): Promise<ConsoleServer> {
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 4, statement_timeout: 2000, application_name: 'ferry-console' });
  const longPool = new pg.Pool({ connectionString: databaseUrl, max: 2, statement_timeout: 30_000, application_name: 'ferry-console' });
  try {
    const server = await startConsole({
      pool,
      longPool,
      schema,
      bossSchema: `${schema}_boss`,
      host: '127.0.0.1',
      port: 0,
      readOnly: false,
      token: BENCH_CONSOLE_TOKEN,
      refreshMs,
    });
    return {
      ...server,
      close: async () => {
        await server.close();
        await pool.end();
        await longPool.end();
      },
    };
  } catch (err) {
    await pool.end();
    await longPool.end();
    throw err;
  }
}
