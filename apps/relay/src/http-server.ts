import { createServer, type Server } from 'node:http';
import { ConfigError } from '@ferry/core';
import { CONSOLE_PATHS, type ConsoleHandler } from './console/server.js';
import { isLoopbackAddress, misdirectedHost } from './loopback-host.js';
import type { Relay } from './types.js';

/**
 * The daemon's HTTP endpoints (node:http, no framework):
 * `/metrics` Prometheus text, `/healthz` 200 while the process runs,
 * `/readyz` 200 when PostgreSQL and NATS are connected and lanes are leased.
 * `host` has no default here: the CLI's (`--http-host`, 127.0.0.1) is the one
 * place that decides who can reach them; they answer without credentials.
 * With the console on a loopback bind, every path answers only a loopback Host with this port
 * (`misdirectedHost`, the console's own rule): one origin, one DNS rebinding defence.
 */
export function startHttpServer(relay: Relay, port: number, host: string, console_?: ConsoleHandler): Promise<Server> {
  const checkHost = console_ !== undefined && isLoopbackAddress(host);
  const server = createServer((req, res) => {
    const misdirected = checkHost ? misdirectedHost(req.headers.host, req.socket.localPort ?? 0) : undefined;
    if (misdirected !== undefined) {
      res.writeHead(421, { 'content-type': 'text/plain; charset=utf-8' }).end(`${misdirected}\n`);
      return;
    }
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    // `ferry relay --console`: the operator console's pages and actions beside the probes.
    if (console_ && CONSOLE_PATHS.has(path)) {
      console_(req, res);
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD' }).end();
      return;
    }
    if (path === '/metrics') {
      relay.metrics().then(
        (text) => res.writeHead(200, { 'content-type': relay.metricsContentType }).end(text),
        (err: Error) => res.writeHead(500, { 'content-type': 'text/plain' }).end(`metrics failed: ${err.message}\n`),
      );
    } else if (path === '/healthz') {
      const alive = relay.state !== 'failed' && relay.state !== 'stopped';
      res.writeHead(alive ? 200 : 503, { 'content-type': 'application/json' }).end(JSON.stringify({ status: relay.state }));
    } else if (path === '/readyz') {
      const ready = relay.ready();
      res
        .writeHead(ready ? 200 : 503, { 'content-type': 'application/json' })
        .end(JSON.stringify({ ready, state: relay.state, lanes: relay.lanes.length }));
    } else {
      res
        .writeHead(404, { 'content-type': 'text/plain' })
        .end(`not found: try /metrics, /healthz or /readyz${console_ ? ', or the console at /' : ''}\n`);
    }
  });
  return new Promise((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'EADDRNOTAVAIL' || err.code === 'ENOTFOUND' || err.code === 'EAI_AGAIN') {
        reject(
          new ConfigError(
            '--http-host',
            `--http-host ${host} is not an address of this host (${err.code}): give 127.0.0.1, 0.0.0.0, :: or one of its interfaces' addresses (FERRY_HTTP_HOST)`,
            { cause: err },
          ),
        );
      } else if (err.code === 'EADDRINUSE' || err.code === 'EACCES') {
        const why = err.code === 'EADDRINUSE' ? 'is in use (another relay on this host?)' : 'needs privileges this process lacks';
        reject(
          new ConfigError(
            '--http-port',
            `--http-port ${port} ${why}: give each relay on a host its own --http-port (FERRY_HTTP_PORT), or 0 to turn /metrics, /healthz and /readyz off`,
            { cause: err },
          ),
        );
      } else reject(err);
    });
    server.listen(port, host, () => {
      server.removeAllListeners('error');
      resolve(server);
    });
  });
}
