export * from './codec.js';
export * from './envelope.js';
export * from './errors.js';
export * from './grants.js';
export * from './identifiers.js';
export * from './migrate.js';
export * from './queryable.js';
export * from './validate.js';
