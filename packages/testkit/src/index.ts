export * from './nats-server.js';
export * from './postgres.js';
export * from './stream.js';
export * from './wait.js';
export * from './tcp-proxy.js';
