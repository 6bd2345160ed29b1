/**
 * Browser tabs for console-load's drain trials, in a process of their own:
 * `--tabs` tabs each fetch the overview fragment and the blocked keys page
 * once a second. Browsers never run in the relay's process, so they must
 * not share its event loop here either. With `--console-url` the tabs hit a
 * console served elsewhere (the relay's own process: `ferry relay` serving
 * it); without it this process serves one too, as `ferry console` would run
 * beside the relay; `--tabs 0` serves one and nothing else). It prints
 * `ready <console url>` once serving or refreshing; on SIGTERM it prints
 * `{"refreshes":n,"failed":n}` and exits.
 *
 *   node bench/dist/lib/console-tabs.js --database-url URL --schema S [--console-url URL] [--tabs 3] [--refresh-ms 5000]
 */
import { arg, declareFlags, numArg, sleep } from './args.js';
import { BENCH_CONSOLE_TOKEN, serveBenchConsole } from './bench-console.js';

declareFlags('node bench/dist/lib/console-tabs.js', 'browser tabs refreshing the console every second, until SIGTERM', {
  'database-url': '<url> the database the console reads (when it serves one)',
  schema: '<name> the Ferry schema',
  'console-url': '<url> refresh this console instead of serving one',
  tabs: '<n> tabs (default 3)',
  'refresh-ms': '<ms> the served console refresh interval (default 5000)',
});

let served: { url: string; close: () => Promise<void> } | undefined;
if (arg('console-url', '') === '') {
  const url = arg('database-url', '');
  const schema = arg('schema', '');
  if (!url || !schema) throw new Error('--database-url and --schema are needed to serve a console');
  served = await serveBenchConsole(url, schema, numArg('refresh-ms', 5000));
}
const base = served?.url ?? arg('console-url', '');
const headers = { authorization: `Bearer ${BENCH_CONSOLE_TOKEN}` };

let on = true;
let refreshes = 0;
let failed = 0;
const tab = async () => {
  while (on) {
    const t = performance.now();
    for (const path of ['/?fragment=1', '/blocked']) {
      try {
        const res = await fetch(`${base}${path}`, { headers });
        await res.text();
        if (res.status === 200) refreshes++;
        else failed++;
      } catch {
        failed++;
      }
    }
    await sleep(Math.max(0, 1000 - (performance.now() - t)));
  }
};
const tabs = Array.from({ length: numArg('tabs', 3) }, tab);
process.stdout.write(`ready ${base}\n`);

process.once('SIGTERM', () => {
  on = false;
  void (async () => {
    await Promise.all(tabs);
    await served?.close();
    process.stdout.write(`${JSON.stringify({ refreshes, failed })}\n`);
    process.exit(0);
  })();
});
