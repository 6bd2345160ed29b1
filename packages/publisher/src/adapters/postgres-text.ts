/**
 * Parameter values in PostgreSQL's text input format, as node-postgres sends
 * them, for drivers that would otherwise pick a type from the JavaScript
 * value and encode it their own way. postgres.js types an array by its first
 * element (an array of Buffers goes out as one `bytea`, which PostgreSQL
 * refuses to cast to `bytea[]`) and runs a `jsonb` parameter through
 * `JSON.stringify` (a JSON text arrives as a JSON string). Text is read by
 * the type's own input function whatever the driver, so the row written is
 * byte for byte the one node-postgres writes.
 */

/** One value as PostgreSQL input text; null stays null. */
export function toPostgresText(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  if (ArrayBuffer.isView(value)) return `\\x${viewToBuffer(value).toString('hex')}`;
  if (value instanceof Date) return value.toISOString();
  if (Array.isArray(value)) return toArrayLiteral(value);
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value);
}

/**
 * An array literal, `{"a","b",NULL}`: every element quoted, so a text that
 * reads `NULL` or holds `{`, `,`, `"` or `\` stays that text (node-postgres's
 * `arrayString`, element for element).
 */
export function toArrayLiteral(values: readonly unknown[]): string {
  const items = values.map((v) => {
    if (Array.isArray(v)) return toArrayLiteral(v);
    const text = toPostgresText(v);
    return text === null ? 'NULL' : `"${text.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;
  });
  return `{${items.join(',')}}`;
}

function viewToBuffer(view: ArrayBufferView): Buffer {
  return Buffer.isBuffer(view) ? view : Buffer.from(view.buffer, view.byteOffset, view.byteLength);
}
