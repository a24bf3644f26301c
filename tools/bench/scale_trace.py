#!/usr/bin/python3
"""Concatenate a Mooncake JSONL trace N times with shifted timestamps (replay scaling benchmark).

    tools/bench/scale_trace.py TRACE N > OUT.jsonl

Copy k (0-based) shifts every `timestamp` by k x (span + gap), where span = last - first timestamp
of the input and gap = the input's mean inter-arrival time, so the copies follow each other
without overlapping. Session ids (if any) get a `#k` suffix so that copies stay separate sessions;
hash ids are kept, so later copies can reuse the prefix cache like a repeated day of traffic.
Uses only the standard library; run with Debian's /usr/bin/python3.
"""
import json
import sys


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    path, copies = sys.argv[1], int(sys.argv[2])
    if copies < 1:
        print("N must be >= 1", file=sys.stderr)
        return 2
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    stamps = [r["timestamp"] for r in rows if "timestamp" in r]
    if not stamps:
        print(f"{path}: no timestamps", file=sys.stderr)
        return 1
    first, last = min(stamps), max(stamps)
    gap = (last - first) / max(1, len(stamps) - 1)
    period = (last - first) + gap
    out = sys.stdout
    for k in range(copies):
        for r in rows:
            row = dict(r)
            if "timestamp" in row:
                row["timestamp"] = row["timestamp"] + k * period
            if "session_id" in row and k > 0:
                row["session_id"] = f"{row['session_id']}#{k}"
            out.write(json.dumps(row, separators=(",", ":")))
            out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
