import { request } from 'node:http';

/** A form as the console's pages post it: fields by name (a list repeats the name), pairs in order, or the encoded body itself. */
export type ConsoleForm = Record<string, string | string[]> | Array<[string, string]> | string;

function encode(form: ConsoleForm): string {
  if (typeof form === 'string') return form;
  const params = new URLSearchParams();
  const pairs = Array.isArray(form) ? form : Object.entries(form).flatMap(([k, v]) => (Array.isArray(v) ? v : [v]).map((x) => [k, x]));
  for (const [k, v] of pairs) params.append(k as string, v as string);
  return params.toString();
}

/**
 * One request to a running console as the operator's browser sends it: the bearer token, and the
 * console's own origin (its CSRF check), a form body when given. Resolves with the status and the body.
 */
export function consoleCall(
  consoleUrl: string,
  token: string,
  method: 'GET' | 'POST',
  path: string,
  form?: ConsoleForm,
): Promise<{ status: number; body: string }> {
  const url = new URL(path, consoleUrl);
  const body = form === undefined ? undefined : encode(form);
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method,
        headers: {
          authorization: `Bearer ${token}`,
          origin: new URL(consoleUrl).origin,
          ...(body !== undefined ? { 'content-type': 'application/x-www-form-urlencoded', 'content-length': Buffer.byteLength(body) } : {}),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}
