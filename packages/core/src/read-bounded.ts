/**
 * Reads a request body (any async iterable of byte chunks, such as an `IncomingMessage`) into one
 * Buffer, and throws `tooLarge()` as soon as it passes `maxBytes`: a client cannot make a server
 * hold more of its body than it allows. Shared by the console's forms and the idempotency bindings.
 */
export async function readBounded(body: AsyncIterable<unknown>, maxBytes: number, tooLarge: () => Error): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += (chunk as Buffer).length;
    if (size > maxBytes) throw tooLarge();
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}
