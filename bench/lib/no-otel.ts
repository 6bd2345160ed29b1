/**
 * `node --import ./bench/dist/lib/no-otel.js …`: runs a process in which
 * Ferry finds no `@opentelemetry/api` (its optional peer dependency), without
 * touching the node_modules other processes use.
 */
import { register } from 'node:module';

register(new URL('./no-otel-hooks.js', import.meta.url));
