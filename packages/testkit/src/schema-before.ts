import { quoteIdentifier } from '@ferry/core';
import type pg from 'pg';

/**
 * Undoes outbox migration `version` in schema `s` (quoted) when `ran` (an SQL condition) holds:
 * `body` (PL/pgSQL statements; `v_src text` is declared for them), then the version is
 * unrecorded, in one DO block.
 */
async function undoOutboxMigration(pool: pg.Pool, s: string, version: number, ran: string, body: string): Promise<void> {
  await pool.query(`DO $undo$
    DECLARE
      v_src text;
    BEGIN
      IF NOT (${ran}) THEN
        RETURN;
      END IF;
      ${body}
      DELETE FROM ${s}.migrations WHERE migration_set = 'outbox' AND version = ${version};
    END
    $undo$`);
}

const CHECK_EVENT = (s: string) => `'${s}.publish_check_event(text, text, text, text, text, text, jsonb)'::regprocedure`;

/**
 * Undoes outbox migration 000018 (when it ran): the publish checks refuse every ce-* header name
 * again, as 000008 and 000005 wrote them. `undoReservedSubjects` starts with it, so a schema
 * taken back to version 15 or 14 is that version.
 */
export async function undoContractHeaders(pool: pg.Pool, schema: string): Promise<void> {
  const s = quoteIdentifier(schema);
  const ok = `'${s}.publish_headers_ok(jsonb)'::regprocedure`;
  await undoOutboxMigration(
    pool,
    s,
    18,
    `pg_get_functiondef(${ok}) ~ 'ce-dataschema'`,
    `EXECUTE regexp_replace(replace(pg_get_functiondef(${ok}), $r$(h.key !~* '^(ce-|nats-)|^content-type$' OR h.key IN ('ce-dataschema', 'ce-dataversion'))$r$,
        $r$h.key !~* '^(ce-|nats-)|^content-type$'$r$), '  -- 000018: .*?  END IF;\n', '');
      EXECUTE replace(pg_get_functiondef(${CHECK_EVENT(s)}), $r$ AND v_name NOT IN ('ce-dataschema', 'ce-dataversion') THEN$r$, ' THEN');`,
  );
}

/**
 * Undoes outbox migration 000016 (when it ran): the publish checks without the reserved-subject
 * rule, as 000008 and 000005 left them, its two functions gone and version 16 unrecorded.
 * `undoPendingTable` starts with it, so a schema taken back to version 14 is that version.
 */
export async function undoReservedSubjects(pool: pg.Pool, schema: string): Promise<void> {
  await undoContractHeaders(pool, schema);
  const s = quoteIdentifier(schema);
  await undoOutboxMigration(
    pool,
    s,
    16,
    `to_regprocedure('${s}.publish_subject_reserved(text)') IS NOT NULL`,
    `SELECT prosrc INTO v_src FROM pg_catalog.pg_proc WHERE oid = '${s}.publish_event_ok(text, text, text, text, text, jsonb)'::regprocedure;
      EXECUTE format('CREATE OR REPLACE FUNCTION ${s}.publish_event_ok(p_k text, p_su text, p_ty text, p_so text, p_ct text, p_h jsonb) '
                     'RETURNS boolean LANGUAGE sql IMMUTABLE AS %L',
                     replace(v_src, E'\\n    AND NOT ${s}.publish_subject_reserved(p_su)', ''));
      EXECUTE replace(pg_get_functiondef(${CHECK_EVENT(s)}),
                      E'\\n  PERFORM ${s}.publish_check_subject(p_prefix || ''subject'', p_subject);', '');
      DROP FUNCTION ${s}.publish_check_subject(text, text), ${s}.publish_subject_reserved(text);`,
  );
}

/**
 * Turns a schema this release migrated back into the outbox of version 14: the event rows carry
 * their delivery state again (pending ones as pending, published ones as published, with their
 * indexes), the tables, view and triggers of outbox migration 000015 (and the audit function and
 * guard of 000017) are gone, the relay floor is 2 and no version from 15 on is recorded. For the tests (and bench/scenarios/migrate-000015.ts) that start from version 14 or take a database back further, to a version
 * an earlier release left, without that release's code.
 */
export async function undoPendingTable(pool: pg.Pool, schema: string): Promise<void> {
  await undoReservedSubjects(pool, schema);
  const s = quoteIdentifier(schema);
  await pool.query(`BEGIN;
    ALTER TABLE ${s}.outbox ADD COLUMN attempts integer NOT NULL DEFAULT 0, ADD COLUMN next_attempt_at timestamptz NOT NULL DEFAULT '-infinity',
      ADD COLUMN last_error text, ADD COLUMN published_at timestamptz, ADD COLUMN dead_at timestamptz;
    UPDATE ${s}.outbox o SET attempts = p.attempts, next_attempt_at = p.next_attempt_at, last_error = p.last_error, dead_at = p.dead_at
      FROM ${s}.outbox_pending p WHERE p.seq = o.seq;
    UPDATE ${s}.outbox o SET attempts = d.attempts, last_error = d.last_error, dead_at = d.dead_at, published_at = d.published_at
      FROM ${s}.outbox_published d WHERE d.seq = o.seq;
    DROP VIEW ${s}.outbox_events;
    DROP TRIGGER outbox_enqueue ON ${s}.outbox; DROP TRIGGER outbox_forget ON ${s}.outbox; DROP TRIGGER outbox_forget_all ON ${s}.outbox;
    DROP FUNCTION ${s}.outbox_enqueue(), ${s}.outbox_forget(), ${s}.outbox_forget_all();
    DROP TABLE ${s}.outbox_pending, ${s}.outbox_published;
    CREATE INDEX outbox_pending_key_idx ON ${s}.outbox (lane, key COLLATE "C", seq) WHERE published_at IS NULL;
    CREATE INDEX outbox_failed_idx ON ${s}.outbox (key, seq) INCLUDE (lane, dead_at) WHERE published_at IS NULL AND attempts > 0;
    CREATE INDEX outbox_published_at_idx ON ${s}.outbox (published_at) WHERE published_at IS NOT NULL;
    UPDATE ${s}.settings SET value = '2' WHERE name = 'relay_protocol_floor';
    -- Outbox migration 000017 (the audit trail's recording function and guard) came after 15: gone too.
    DROP TRIGGER IF EXISTS operator_actions_guard ON ${s}.operator_actions;
    DROP FUNCTION IF EXISTS ${s}.operator_actions_guard(), ${s}.record_operator_action(text, text, text, jsonb, integer, text);
    DELETE FROM ${s}.migrations WHERE migration_set = 'outbox' AND version >= 15;
    COMMIT`);
}
