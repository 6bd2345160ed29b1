/**
 * The publisher's statements call the SECURITY DEFINER functions of outbox
 * migration 000003 (`publish_event`, `publish_events`; 000005 holds their
 * checks of reserved headers, subjects and control characters, raised as
 * SQLSTATE 22023 and turned into a ValidationError, and 000006 redefines them
 * with those checks and the version and pruned-id guards), which hold the SQL:
 * a publishing role needs EXECUTE on them and no table privilege, and
 * PL/pgSQL caches their plans per connection whatever client calls them.
 * $1 ids, $2 keys, $3 versions (or null), $4 subjects, $5 types, $6 sources,
 * $7 content types, $8 data, $9 headers, $10 occurred at, $11 NOTIFY channel
 * (null: no notify), $12 whether any id was given by the caller (only those
 * can exist already) — arrays for the batch, scalars for one event.
 */
export function insertEventsSql(schemaSql: string): string {
  return `SELECT id, seq, version, existing, same FROM ${schemaSql}.publish_events($1::uuid[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bytea[], $9::jsonb[], $10::timestamptz[], $11::text, $12::boolean)`;
}

export function insertEventSql(schemaSql: string): string {
  return `SELECT id, seq, version, existing, same FROM ${schemaSql}.publish_event($1::uuid, $2::text, $3::bigint, $4::text, $5::text, $6::text, $7::text, $8::bytea, $9::jsonb, $10::timestamptz, $11::text, $12::boolean)`;
}
