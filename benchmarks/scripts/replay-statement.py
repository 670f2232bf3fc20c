#!/usr/bin/env python3
"""Replays one statement the store sent, as it sent it, to measure it and variants of it.

The store's statements are long and take many array parameters, so a claim cannot be typed into
psql. Let the store's role log what it runs (``ALTER ROLE r SET log_min_duration_statement = 0``:
PostgreSQL then logs each execution's text and its parameters), make it claim once, and give this
script the server's log. It writes the last execution whose text starts with PREFIX as a
``PREPARE pg AS ...`` file and its parameters, and with ``--runs N`` runs it N times in psql
(generic plan, in a transaction rolled back, so a claim's lane locks are not kept) and prints the
mean milliseconds per execution. Edit the PREPARE file to measure a variant of the statement
against the same parameters (docs/design/storage-v2.md, "What is left").

  benchmarks/scripts/replay-statement.py LOG 'WITH req AS' OUT_DIR [--runs 100] [--psql ARGS]
"""
import argparse
import re
import subprocess
from pathlib import Path


def last_execution(log_text, prefix):
    lines = log_text.split("\n")
    found = None
    for i, line in enumerate(lines):
        m = re.search(r"duration: [0-9.]+ ms  execute [^:]*: (.*)$", line)
        if not m or not m.group(1).startswith(prefix):
            continue
        text, j = [m.group(1)], i + 1
        while j < len(lines) and lines[j].startswith("\t"):
            text.append(lines[j][1:])
            j += 1
        params = ""
        if j < len(lines) and "DETAIL:  parameters: " in lines[j]:
            params = lines[j].split("parameters: ", 1)[1]
            k = j + 1
            while k < len(lines) and lines[k].startswith("\t"):
                params += "\n" + lines[k][1:]
                k += 1
        found = ("\n".join(text), params)
    if found is None:
        raise SystemExit(f"no execution starting with {prefix!r} in the log")
    return found


def arguments(params):
    values = {}
    for m in re.finditer(r"\$(\d+) = (NULL|'((?:[^']|'')*)')", params):
        values[int(m.group(1))] = None if m.group(2) == "NULL" else m.group(3)
    count = max(values) if values else 0
    return ", ".join(
        "NULL" if values.get(n) is None else "'" + values[n] + "'" for n in range(1, count + 1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("log")
    parser.add_argument("prefix")
    parser.add_argument("out")
    parser.add_argument("--runs", type=int, default=0)
    parser.add_argument("--psql", default="-h 127.0.0.1 -U postgres -d test")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text, params = last_execution(Path(args.log).read_text(errors="replace"), args.prefix)
    (out / "statement.sql").write_text("PREPARE pg AS " + text + ";\n")
    (out / "arguments.txt").write_text(arguments(params))
    print(f"wrote {out / 'statement.sql'} and {out / 'arguments.txt'}")
    if args.runs:
        execute = f"EXECUTE pg({(out / 'arguments.txt').read_text()});\n"
        script = ("SET plan_cache_mode = force_generic_plan;\n" + (out / "statement.sql").read_text()
                  + "BEGIN;\n\\o /dev/null\n" + execute
                  + "SELECT clock_timestamp() AS t0 \\gset\n" + execute * args.runs + "\\o\n"
                  + f"SELECT round(extract(epoch FROM clock_timestamp() - :'t0'::timestamptz)"
                  + f" * 1000 / {args.runs}, 3);\nROLLBACK;\n")
        result = subprocess.run(["psql", "-X", "-qAt", *args.psql.split()], input=script,
                                capture_output=True, text=True)
        lines = [l for l in result.stdout.split("\n") if l.strip()]
        print(f"ms per execution: {lines[-1] if lines else result.stderr.strip()}")


if __name__ == "__main__":
    main()
