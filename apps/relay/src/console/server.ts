import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { isValidationError, quoteIdentifier, readBounded } from '@ferry/core';
import { SelectionChangedError } from '../actions/failed.js';
import { isLoopbackAddress, misdirectedHost } from '../loopback-host.js';
import { CONSOLE_CSS, CONSOLE_JS } from './assets.js';
import { auditPages } from './audit.js';
import { consoleAuth } from './auth.js';
import { blockedPages } from './blocked.js';
import { dlqPages } from './dlq.js';
import { eventsPages } from './events.js';
import { esc, readForm } from './html.js';
import { pageKit } from './layout.js';
import { BODY_LIMIT, PACE } from './limits.js';
import type { ConsoleOptions, ConsoleServer, ConsoleSetup } from './options.js';
import { overviewPages } from './overview.js';
import { type Action, type ConsoleContext, HttpError, type Page, type Req } from './page-kit.js';
import { parkedPages } from './parked.js';
import { replayPages } from './replay.js';
import { consoleSnapshot } from './snapshot.js';
import { streamsConsole } from './streams.js';
import { versionsPages } from './versions.js';

export type { ConsoleOptions, ConsoleServer } from './options.js';

// The console's HTTP server: its routes, gathered from the page modules (a page is the module named
// by its URL: /events → events.ts), and the dispatch every request goes through (the Host check,
// the static assets, who is asking, /login, the page or action, and the error page).

const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/** The console's pages and actions, for an HTTP server of its own or the relay's (`ferry relay --console`). */
export type ConsoleHandler = (req: IncomingMessage, res: ServerResponse) => void;

/** The paths the console serves: what `ferry relay --console` hands it on the relay's HTTP port. */
export const CONSOLE_PATHS = new Set([
  '/',
  '/blocked',
  '/events',
  '/event',
  '/parked',
  '/versions',
  '/streams',
  '/audit',
  '/login',
  '/console.css',
  '/console.js',
  '/favicon.ico',
  '/dlq/preview',
  '/dlq/apply',
  '/parked/preview',
  '/parked/apply',
  '/skip/preview',
  '/skip/apply',
  '/replay/preview',
  '/replay/apply',
  '/streams/preview',
  '/streams/apply',
]);

/** Starts the console's HTTP server; resolves once it listens. */
export async function startConsole(o: ConsoleOptions): Promise<ConsoleServer> {
  const server = createServer(consoleHandler(o));
  server.headersTimeout = 10_000;
  server.requestTimeout = 30_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port, o.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const addr = server.address() as AddressInfo;
  const shownHost = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  return {
    url: `http://${shownHost}:${addr.port}`,
    server,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** The console's request handler; `o.host` is the address it is reached on (loopback or not decides who reads). */
export function consoleHandler(o: ConsoleSetup): ConsoleHandler {
  const loopback = isLoopbackAddress(o.host);
  const auth = consoleAuth(o);
  const { principal, csrfFor } = auth;
  const kit = pageKit(o, auth);
  const { loginPage, login } = auth.loginRoutes(kit);
  const drops: Array<() => void> = [];
  const pace = o.pace ?? PACE;
  /**
   * When a shared read is read again: after the refresh interval, or PACE times as long as the read
   * took, whichever is longer. The console then spends at most 1/PACE of a connection's time on it,
   * however large the outbox (a status over a million pending rows takes seconds) and however many
   * tabs are open, so the relays it watches keep their speed.
   */
  const c: ConsoleContext = {
    o,
    s: quoteIdentifier(o.schema),
    longPool: o.longPool ?? o.pool,
    kit,
    pace,
    paced: (tookMs) => Math.max(o.refreshMs, pace * tookMs),
    changed: () => {
      for (const drop of drops) drop();
    },
    onChanged: (drop) => {
      drops.push(drop);
    },
  };
  const streams = streamsConsole({ ...o, longPool: c.longPool }, kit);
  const snapshot = consoleSnapshot(c, streams.natsView);
  const modules = [
    overviewPages({ ...c, snapshotView: snapshot.view }, streams),
    blockedPages(c),
    eventsPages(c),
    parkedPages(c),
    versionsPages(c),
    {
      get: { '/streams': streams.streamsPage },
      post: { '/streams/preview': streams.streamsPreview, '/streams/apply': streams.streamsApply },
    },
    auditPages(c),
    dlqPages(c),
    replayPages(c),
  ];
  const GET: Record<string, Page> = Object.assign({}, ...modules.map((m) => m.get ?? {}));
  const POST: Record<string, Action> = Object.assign({}, ...modules.map((m) => m.post ?? {}));

  async function readBody(req: IncomingMessage): Promise<URLSearchParams> {
    const type = req.headers['content-type'] ?? '';
    if (!/^application\/x-www-form-urlencoded\b/i.test(type)) throw new HttpError(415, 'send a form (application/x-www-form-urlencoded)');
    const body = await readBounded(req, BODY_LIMIT, () => new HttpError(413, `form larger than ${BODY_LIMIT} bytes`));
    return readForm(body.toString('utf8'));
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    res.setHeader('content-security-policy', CSP);
    res.setHeader('x-content-type-options', 'nosniff');
    res.setHeader('x-frame-options', 'DENY');
    res.setHeader('referrer-policy', 'same-origin');
    res.setHeader('cache-control', 'no-store');
    const url = new URL(req.url ?? '/', 'http://console.invalid');
    // DNS rebinding: on a loopback bind, only a loopback name and this port name this console.
    const misdirected = loopback ? misdirectedHost(req.headers.host, req.socket.localPort ?? 0) : undefined;
    if (misdirected !== undefined) throw new HttpError(421, misdirected);
    if (req.method === 'GET' && url.pathname === '/console.css') {
      res.setHeader('content-type', 'text/css; charset=utf-8');
      res.end(CONSOLE_CSS);
      return;
    }
    if (req.method === 'GET' && url.pathname === '/favicon.ico') {
      res.statusCode = 204; // no icon, and no 404 in the browser's console
      res.end();
      return;
    }
    if (req.method === 'GET' && url.pathname === '/console.js') {
      res.setHeader('content-type', 'text/javascript; charset=utf-8');
      res.end(CONSOLE_JS);
      return;
    }
    const who = principal(req);
    const r: Req = { req, url, who, csrf: csrfFor(who) };
    let out: string | undefined;
    if (url.pathname === '/login') {
      out = req.method === 'POST' ? login(r, await readBody(req), res) : loginPage(r);
    } else if (req.method === 'GET' || req.method === 'HEAD') {
      const page = GET[url.pathname];
      if (!page) throw new HttpError(404, `no page ${url.pathname}`);
      // Off loopback every page needs credentials; on it, reads are open and actions still need them.
      if (!loopback && who === null) {
        if (o.basic) res.setHeader('www-authenticate', 'Basic realm="ferry console", charset="UTF-8"');
        res.statusCode = 401;
        out = loginPage(r, 'Log in to see this console.');
      } else out = await page(r);
    } else if (req.method === 'POST') {
      const action = POST[url.pathname];
      if (!action) throw new HttpError(404, `no action ${url.pathname}`);
      out = await action(r, await readBody(req));
    } else throw new HttpError(405, `${req.method} is not served`);
    if (out === undefined) {
      res.end();
      return;
    }
    res.setHeader('content-type', 'text/html; charset=utf-8');
    if (r.status !== undefined) res.statusCode = r.status;
    res.end(req.method === 'HEAD' ? undefined : out);
  }

  function fail(req: IncomingMessage, res: ServerResponse, err: unknown): void {
    const status =
      err instanceof HttpError
        ? err.status
        : isValidationError(err)
          ? 400
          : err instanceof SelectionChangedError
            ? 409
            : (err as { code?: string })?.code === '57014'
              ? 503
              : 500;
    const message =
      (err as { code?: string })?.code === '57014'
        ? 'the query took longer than the statement timeout (--statement-timeout-ms): narrow the filter'
        : ((err as Error)?.message ?? String(err));
    if (res.headersSent) {
      res.destroy();
      return;
    }
    res.statusCode = status;
    res.setHeader('content-type', 'text/html; charset=utf-8');
    res.end(
      `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${status} · Ferry console</title><link rel="stylesheet" href="/console.css"></head><body><main><h1>${status}</h1><p class="advice" id="error">${esc(message)}</p><p><a href="/">Overview</a></p></main></body></html>`,
    );
    void req;
  }

  return (req, res) => {
    handle(req, res).catch((err) => fail(req, res, err));
  };
}
