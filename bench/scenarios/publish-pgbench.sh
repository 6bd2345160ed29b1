#!/usr/bin/env bash
# PostgreSQL's side of a publish, without Node: pgbench runs `BEGIN; UPDATE
# accounts; <event>; COMMIT` from N clients for each variant, and the whole
# machine's busy CPU (/proc/stat) is divided by the transactions. pgbench's
# own CPU is in it, the same for every variant. Variants, interleaved in
# rounds, tables emptied before each run:
#   plain       INSERT of the same JSON into a bigserial table (the baseline);
#   statement   the key_versions upsert and the outbox insert as one statement;
#   publish     publish_event as the publisher calls it (generated id, next version);
#   full        publish_event_full: the 000006/000007 function that 000008 renamed
#               (its check now runs the per-event rules 000008 inlined).
# Not part of npm run bench; needs pgbench and a built tree (npm run build).
#
#   bash bench/scenarios/publish-pgbench.sh [--clients 8] [--seconds 4] [--rounds 3]
set -euo pipefail

clients=8 seconds=4 rounds=3
while [ $# -gt 0 ]; do
  case "$1" in
    --clients) clients=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --help)
      sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
      exit 0 ;;
    *) echo "unknown flag $1 (see --help)" >&2; exit 2 ;;
  esac
done
command -v pgbench >/dev/null || { echo "pgbench is not on PATH" >&2; exit 2; }

url=${FERRY_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}
schema=bench_pgbench_$$
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
cleanup() { psql -q "$url" -c "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT

node "$root/apps/relay/bin/ferry.js" migrate --database-url "$url" --schema "$schema" --lanes 16 >/dev/null
psql -q "$url" <<SQL
CREATE TABLE $schema.accounts (id int PRIMARY KEY, balance bigint NOT NULL DEFAULT 0);
INSERT INTO $schema.accounts (id) SELECT generate_series(1, 10000);
CREATE TABLE $schema.plain_events (id bigserial PRIMARY KEY, key text NOT NULL, data jsonb NOT NULL);
SQL

json='{"orderId":"order-1","total":4999,"currency":"EUR","lines":[{"sku":"sku-1","qty":2}]}'
args="gen_random_uuid(), 'order-' || :k, NULL, 'orders.placed', 'OrderPlaced', 'bench', 'application/json', convert_to('$json', 'UTF8'), '{}', now(), 'ferry_$schema', false"
declare -A event=(
  [plain]="INSERT INTO $schema.plain_events (key, data) VALUES ('order-' || :k, '$json');"
  [statement]="WITH b AS (INSERT INTO $schema.key_versions AS kv (key, version) VALUES ('order-' || :k, 1) ON CONFLICT (key) DO UPDATE SET version = kv.version + 1 RETURNING kv.version) INSERT INTO $schema.outbox (id, key, version, subject, type, source, content_type, data, headers, occurred_at) SELECT gen_random_uuid(), 'order-' || :k, b.version, 'orders.placed', 'OrderPlaced', 'bench', 'application/json', convert_to('$json', 'UTF8'), '{}', now() FROM b RETURNING seq, version;"
  [publish]="SELECT * FROM $schema.publish_event($args);"
  [full]="SELECT * FROM $schema.publish_event_full($args);"
)
variants=(plain statement publish full)
for v in "${variants[@]}"; do
  printf '\\set a random(1, 10000)\n\\set k random(1, 5000)\nBEGIN;\nUPDATE %s.accounts SET balance = balance + 1 WHERE id = :a;\n%s\nCOMMIT;\n' \
    "$schema" "${event[$v]}" >"$work/$v.sql"
done

busy() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
declare -A results
for ((r = 1; r <= rounds; r++)); do
  for v in "${variants[@]}"; do
    psql -q "$url" -c "TRUNCATE $schema.outbox, $schema.key_versions, $schema.plain_events" >/dev/null
    a=$(busy)
    n=$(pgbench -n -M prepared -c "$clients" -j 2 -T "$seconds" -f "$work/$v.sql" "$url" 2>/dev/null | awk '/actually processed/{print $NF}')
    b=$(busy)
    us=$(( (b - a) * 1000000 / $(getconf CLK_TCK) / n ))
    results[$v]="${results[$v]:-} $us"
    echo "round $r  $v: $((n / seconds)) tx/s, ${us} µs of machine CPU per transaction"
  done
done
echo
echo "µs of machine CPU per transaction, $clients clients, rounds:"
for v in "${variants[@]}"; do printf '  %-10s%s\n' "$v" "${results[$v]}"; done
