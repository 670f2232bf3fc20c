#!/usr/bin/env bash
# What rotating a partitioned queue table by TRUNCATE costs its readers (storage v2's rotation,
# docs/design/storage-v2.md). A table of three id-range partitions; four pgbench clients read one
# lane's next 20 rows of the newest partition through the parent as a prepared statement, while a
# loop truncates the oldest partition about five times a second with a short lock_timeout. Each
# combination of plan (generic: run-time pruning, which locks every partition; custom: plan-time
# pruning, which locks only the partition read) and rotation runs 20 s. Rotation: none;
# truncating; truncating while another session holds a REPEATABLE READ transaction that read the
# table (a report query, pg_dump: it holds every partition's lock until it ends, so no TRUNCATE
# can take its lock, and each attempt holds up the reads queued behind it until lock_timeout).
# Prints each cell's read latency p99, p99.9 and max, and how many TRUNCATEs took their lock.
#
#   benchmarks/scripts/rotation-locks.sh [host] [port] [database]   (default 127.0.0.1 5432 test)
#
# Needs psql and pgbench on the PATH (Debian: /usr/lib/postgresql/<version>/bin). Creates and
# drops a table named rotation_locks in the database.
set -euo pipefail
host=${1:-127.0.0.1}
port=${2:-5432}
db=${3:-test}
seconds=20
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sql() { psql -h "$host" -p "$port" -U postgres -d "$db" -X -q "$@"; }

sql <<'SQL'
SET client_min_messages = warning;
DROP TABLE IF EXISTS rotation_locks;
CREATE TABLE rotation_locks (id bigint NOT NULL, lane smallint NOT NULL, payload text)
  PARTITION BY RANGE (id);
CREATE TABLE rotation_locks_0 PARTITION OF rotation_locks FOR VALUES FROM (0) TO (1000000);
CREATE TABLE rotation_locks_1 PARTITION OF rotation_locks FOR VALUES FROM (1000000) TO (2000000);
CREATE TABLE rotation_locks_2 PARTITION OF rotation_locks FOR VALUES FROM (2000000) TO (3000000);
CREATE INDEX ON rotation_locks (lane, id);
INSERT INTO rotation_locks SELECT g, g % 256, 'x' FROM generate_series(1, 300000) g;
INSERT INTO rotation_locks SELECT g, g % 256, 'x' FROM generate_series(1000001, 1300000) g;
INSERT INTO rotation_locks SELECT g, g % 256, 'x' FROM generate_series(2000001, 2300000) g;
ANALYZE rotation_locks;
SQL

# the read: one lane's next 20 rows after an id; pgbench binds :lane and :after as $1 and $2
read='SELECT count(*) FROM (SELECT id FROM rotation_locks WHERE lane = $1 AND id > $2 ORDER BY id LIMIT 20) s'
read_by_pgbench=${read/\$1/:lane}
printf '\\set lane random(0, 255)\n\\set after 2000000\n%s;\n' "${read_by_pgbench/\$2/:after}" > "$work/read.sql"

echo "PostgreSQL $(sql -Atc 'SHOW server_version'), $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
for plan in force_generic_plan force_custom_plan; do
  locked=$(sql -At <<SQL | tail -1
SET plan_cache_mode = $plan;
PREPARE q(int, bigint) AS $read;
BEGIN;
EXECUTE q(1, 2000000);
SELECT string_agg(relation::regclass::text, ' ' ORDER BY relation::regclass::text) FROM pg_locks
WHERE pid = pg_backend_pid() AND locktype = 'relation' AND relation::regclass::text ~ '^rotation_locks_[0-9]+$';
COMMIT;
SQL
)
  echo "$plan: a read locks $locked"
  for rotation in none truncating held; do
    rm -f "$work"/pgbench_log.*
    (cd "$work" && PGOPTIONS="-c plan_cache_mode=$plan" pgbench -h "$host" -p "$port" -U postgres \
      -n -M prepared -c 4 -j 2 -T "$seconds" -f read.sql -l "$db" >/dev/null 2>&1) &
    reader=$!
    took=0 refused=0
    holder=
    if [ "$rotation" = held ]; then
      (printf 'BEGIN ISOLATION LEVEL REPEATABLE READ;\nSELECT 1 FROM rotation_locks LIMIT 1;\nSELECT pg_sleep(%s);\nCOMMIT;\n' \
        "$seconds" | sql >/dev/null 2>&1) &
      holder=$!
    fi
    if [ "$rotation" != none ]; then
      sleep 1
      end=$((SECONDS + seconds - 2))
      while [ $SECONDS -lt $end ]; do
        if sql -c "SET lock_timeout = '50ms'; TRUNCATE rotation_locks_0" 2>/dev/null; then
          took=$((took + 1))
        else
          refused=$((refused + 1))
        fi
        sleep 0.2
      done
    fi
    wait $reader
    if [ -n "$holder" ]; then wait "$holder"; fi
    cat "$work"/pgbench_log.* | awk '{print $3}' | sort -n | awk -v plan="$plan" -v rot="$rotation" \
      -v took="$took" -v refused="$refused" '{a[NR] = $1} END {
        printf "  %-10s reads %d, p99 %.2f ms, p99.9 %.2f ms, max %.2f ms", rot, NR,
          a[int(NR * 0.99)] / 1000, a[int(NR * 0.999)] / 1000, a[NR] / 1000
        if (rot != "none") printf "; TRUNCATE took its lock %d times, timed out %d", took, refused
        printf "\n" }'
  done
done
sql -c 'DROP TABLE rotation_locks'
