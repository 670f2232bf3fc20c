#!/usr/bin/env python3
"""Measures what the page statement would cost if the event row were the log row.

Takes the page statement of a claim as ``replay-statement.py`` wrote it (``DIR/statement.sql``,
``DIR/arguments.txt``; prefix ``'WITH req AS'``), and writes three variants beside it:

- ``event-row``: the statement over a table ``<schema>.<prefix>log_x`` that is every log row joined
  with its event (the event row as the log row: lane, id and xid on the event), with the same two
  indexes as the log; the event's columns come with the row the page found, no second fetch;
- ``tid-join``: as built, the event fetched by a plain join on its ``ctid`` instead of the LATERAL
  subquery with its fallback by key;
- ``batched``: as built, every event fetched by one TID scan (``ctid = ANY``) and returned as rows
  of their own (the client would join them).

Then it runs the original and the variants in turns (``--rounds``, ``--runs`` executions each,
generic plans, in a transaction rolled back), prints the mean milliseconds per execution, and
checks that every variant returns the same deliveries (lane, id, event, payload) as the original.

  benchmarks/scripts/page-variants.py DIR --schema rp --prefix relaybus_ [--rounds 5] [--runs 200]
      [--psql '-h 127.0.0.1 -U postgres -d test']
"""
import argparse
import re
import subprocess
from pathlib import Path


def psql(args, script):
    result = subprocess.run(["psql", "-X", "-qAt", *args.psql.split()], input=script,
                            capture_output=True, text=True)
    if result.returncode != 0 or "ERROR" in result.stderr:
        raise SystemExit(result.stderr)
    return [line for line in result.stdout.split("\n") if line.strip()]


def cut_event_fetch(s):
    start = s.index("FROM items i LEFT JOIN LATERAL (")
    end_marker = "WHERE NOT i.blocked LIMIT 1) e ON true"
    end = s.index(end_marker) + len(end_marker)
    return s[:start], s[end:]


def variants(s, log, events, log_x):
    before, after = cut_event_fetch(s)
    out = {}
    # the event row as the log row
    v = (before + "FROM items i" + after).replace(f"{log} g", f"{log_x} g")
    extra = ", g.type, g.payload, g.content_type, g.headers"
    v = re.sub(r"g\.event_tid,(\s*)g\.ctid AS log_tid",
               lambda m: "g.event_tid," + m.group(1) + "g.ctid AS log_tid" + extra, v)
    v = v.replace("g.event_tid, g.log_tid", "g.event_tid, g.log_tid" + extra)
    out["event-row"] = v.replace("e.type, e.payload, e.content_type, e.headers, e.created_at,",
                                 "i.type, i.payload, i.content_type, i.headers, i.created_at,")
    out["tid-join"] = (before + f"FROM items i LEFT JOIN {events} e ON e.ctid = i.event_tid"
                       " AND e.id = i.event_id AND NOT i.blocked" + after)
    b = (before + "FROM items i" + after).replace(
        "e.type, e.payload, e.content_type, e.headers, e.created_at,",
        "NULL::text AS type, NULL::bytea AS payload, NULL::text AS content_type,"
        " NULL::json AS headers, NULL::timestamptz AS created_at,")
    marker = "  UNION ALL\n  -- what the page read"
    k = b.index(marker)
    out["batched"] = b[:k] + f"""  UNION ALL
  SELECT NULL, NULL, NULL, NULL, e.id, NULL, NULL, NULL, NULL,
         e.type, e.payload, e.content_type, e.headers, e.created_at,
         NULL, NULL, NULL, NULL, NULL, NULL, NULL, e.ctid::text, NULL, NULL
  FROM {events} e
  WHERE e.ctid = ANY (ARRAY(SELECT it.event_tid FROM items it WHERE NOT it.blocked))
""" + b[k:]
    return out


def timed(args, statement, arguments):
    execute = f"EXECUTE pg({arguments});\n"
    script = ("SET plan_cache_mode = force_generic_plan;\n" + statement + "BEGIN;\n\\o /dev/null\n"
              + execute + "SELECT clock_timestamp() AS t0 \\gset\n" + execute * args.runs
              + "\\o\nSELECT round(extract(epoch FROM clock_timestamp() - :'t0'::timestamptz)"
              + f" * 1000 / {args.runs}, 3);\nROLLBACK;\n")
    return float(psql(args, script)[-1])


def deliveries(args, statement, arguments):
    script = ("SET plan_cache_mode = force_generic_plan;\n" + statement + "BEGIN;\n"
              + f"CREATE TEMP TABLE out_rows AS EXECUTE pg({arguments});\n"
              + "SELECT count(id), md5(string_agg(lane || ':' || id || ':' || event_id || ':'"
              + " || md5(coalesce(payload, (SELECT o.payload FROM out_rows o WHERE o.id IS NULL"
              + " AND o.event_id = r.event_id AND o.log_tid IS NOT NULL LIMIT 1))), ','"
              + " ORDER BY id)) FROM out_rows r WHERE id IS NOT NULL;\nROLLBACK;\n")
    return psql(args, script)[-1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--schema", required=True)
    parser.add_argument("--prefix", default="relaybus_")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--psql", default="-h 127.0.0.1 -U postgres -d test")
    args = parser.parse_args()
    base = Path(args.dir)
    statement = (base / "statement.sql").read_text()
    arguments = (base / "arguments.txt").read_text()
    p = f"{args.schema}.{args.prefix}"
    log, events, log_x = p + "log", p + "events", p + "log_x"
    psql(args, f"""DROP TABLE IF EXISTS {log_x};
CREATE TABLE {log_x} AS SELECT g.id, g.xid, g.lane, g.event_id, g.handlers, g.key, g.created_at,
  g.event_tid, e.type, e.payload, e.content_type, e.headers
  FROM {log} g JOIN {events} e ON e.id = g.event_id ORDER BY g.id;
CREATE INDEX ON {log_x} (lane, id);
CREATE INDEX ON {log_x} (xid);
VACUUM ANALYZE {log_x};
""")
    forms = {"as built": statement, **variants(statement, log, events, log_x)}
    expected = deliveries(args, statement, arguments)
    for name, text in forms.items():
        got = deliveries(args, text, arguments)
        print(f"{name}: deliveries {got}" + ("" if got == expected else "  DIFFERENT"))
    print("| round | " + " | ".join(forms) + " |")
    print("|---:|" + "---:|" * len(forms))
    for r in range(1, args.rounds + 1):
        times = [timed(args, text, arguments) for text in forms.values()]
        print(f"| {r} | " + " | ".join(f"{t:.2f}" for t in times) + " |")


if __name__ == "__main__":
    main()
