// The client side of Idempotency-Key: ONE key per logical operation, reused
// for every retry, with bounded exponential backoff and full jitter
// (cockatiel). Retries only what a retry can fix: no response at all, 409
// (the first attempt is still running), 408, 425, 429 and 5xx. Other 4xx are final.
import { randomUUID } from 'node:crypto';
import { ExponentialBackoff, fullJitterGenerator, handleWhen, retry } from 'cockatiel';

export interface ApiAnswer {
  status: number;
  /** True when the server replayed the answer of an earlier attempt. */
  replayed: boolean;
  body: unknown;
}

/** No response came back (connection refused or reset, timeout): the request may or may not have run. */
export const isNetworkError = (err: unknown): boolean =>
  err instanceof TypeError || (err instanceof DOMException && (err.name === 'TimeoutError' || err.name === 'AbortError'));

/** 409: the first attempt is still in progress. 408, 425, 429 and 5xx: not executed, nothing stored. */
export const isRetryableStatus = (status: number): boolean => [408, 409, 425, 429].includes(status) || status >= 500;

export function createRetryPolicy({ retries = 4, initialDelayMs = 100, maxDelayMs = 5_000 } = {}) {
  return retry(
    handleWhen(isNetworkError).orWhenResult((r) => isRetryableStatus((r as ApiAnswer).status)),
    {
      maxAttempts: retries, // retries after the first attempt
      backoff: new ExponentialBackoff({ generator: fullJitterGenerator, initialDelay: initialDelayMs, maxDelay: maxDelayMs }),
    },
  );
}

export async function placeOrder(baseUrl: string, order: { sku: string; qty: number }, policy = createRetryPolicy()): Promise<ApiAnswer> {
  const key = randomUUID(); // once per logical operation, never per attempt
  return policy.execute(async () => {
    const res = await fetch(`${baseUrl}/orders`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify(order),
      signal: AbortSignal.timeout(5_000),
    });
    const text = await res.text();
    const body: unknown = text && res.headers.get('content-type')?.includes('json') ? JSON.parse(text) : text;
    return { status: res.status, replayed: res.headers.get('idempotent-replayed') === 'true', body };
  });
}
