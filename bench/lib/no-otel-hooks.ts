/**
 * Module hooks that hide `@opentelemetry/api` from Ferry's one door to it
 * (packages/core/src/otel.ts), as if the optional peer were not installed:
 * registered by `no-otel.ts`. Other importers still get it: pg-boss, which the
 * relay and the inbox run on, imports the API itself (a required peer of
 * pg-boss 12), so a relay process always loads it.
 */
import type { ResolveHook } from 'node:module';

export const resolve: ResolveHook = (specifier, context, next) => {
  if (specifier.startsWith('@opentelemetry/') && /\/core\/dist\/otel\.js$/.test(context.parentURL ?? '')) {
    const err = new Error(`Cannot find package '${specifier}' (hidden by bench/lib/no-otel.ts)`) as Error & { code: string };
    err.code = 'ERR_MODULE_NOT_FOUND';
    throw err;
  }
  return next(specifier, context);
};
