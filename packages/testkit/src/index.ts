export * from './nats-server.js';
export * from './postgres.js';
export * from './schema-before.js';
export * from './stream.js';
export * from './tcp-proxy.js';
export * from './wait.js';
