import { describeValue, ValidationError } from '@ferry/core';

export const BODY_KINDS = ['none', 'json', 'text', 'bytes'] as const;
export type BodyKind = (typeof BODY_KINDS)[number];

export interface EncodedBody {
  readonly kind: BodyKind;
  readonly bytes: Buffer | null;
}

/** The body as stored, byte for byte: a replay answers exactly what the first request answered. */
export function encodeBody(body: unknown): EncodedBody {
  if (body === undefined) return { kind: 'none', bytes: null };
  if (typeof body === 'string') return { kind: 'text', bytes: Buffer.from(body, 'utf8') };
  if (body instanceof Uint8Array) return { kind: 'bytes', bytes: Buffer.from(body.buffer, body.byteOffset, body.byteLength) };
  let text: string | undefined;
  try {
    text = JSON.stringify(body);
  } catch (err) {
    throw new ValidationError('result.body', `the operation's result body is not JSON-serialisable (${(err as Error).message})`, {
      cause: err,
    });
  }
  if (text === undefined) {
    throw new ValidationError(
      'result.body',
      `the operation's result body ${describeValue(body)} has no JSON form; return a JSON value, a string or bytes`,
    );
  }
  return { kind: 'json', bytes: Buffer.from(text, 'utf8') };
}

export function decodeBody(kind: BodyKind, bytes: Buffer | null): unknown {
  switch (kind) {
    case 'none':
      return undefined;
    case 'text':
      return (bytes ?? Buffer.alloc(0)).toString('utf8');
    case 'bytes':
      return bytes ?? Buffer.alloc(0);
    case 'json':
      return JSON.parse((bytes ?? Buffer.alloc(0)).toString('utf8'));
  }
}
