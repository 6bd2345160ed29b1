/** The outbox table of `$1` (an already quoted schema name followed by `.outbox`), or null when there is none. */
export const OUTBOX_TABLE_SQL = 'SELECT to_regclass($1) AS t';
