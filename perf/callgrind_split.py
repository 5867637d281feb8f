#!/usr/bin/env python3
"""Splits a callgrind profile of sluice's fan-out (perf/callgrind_fanout.sh) into the work
done per delivery and the work done per connection visit of the write pass.

At hundreds of subscribers the write pass visits each connection once per pass and writes
what it has then; how many deliveries one visit carries depends on timing (under valgrind
as on the machine), so instructions per delivery alone move with the number of visits.
This prints both parts: the instructions outside the write pass per delivery, and those
inside it per visit (a visit = one written connection, counted as the calls of
`ConnSide::settle_written` from the write pass).

Usage: perf/callgrind_split.py FILE.cg DELIVERED
"""
import re
import sys
from collections import Counter


def parse(path):
    """Total Ir, inclusive Ir of calls by (caller, callee), and call counts."""
    names = {}
    total = 0
    calls = Counter()
    inclusive = Counter()
    fn = cfn = None
    pending = None

    def name(token):
        m = re.match(r"\((\d+)\)(?: (.*))?", token)
        if not m:
            return token
        if m.group(2):
            names[m.group(1)] = m.group(2)
        return names.get(m.group(1), m.group(1))

    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("fn="):
                fn = name(line[3:].strip())
            elif line.startswith("cfn="):
                cfn = name(line[4:].strip())
            elif line.startswith("calls="):
                pending = int(line[6:].split()[0])
            elif line.startswith("summary:") or line.startswith("totals:"):
                total = max(total, int(line.split()[1]))
            elif line[:1].isdigit() or line[:1] in "+-*":
                parts = line.split()
                cost = int(parts[1]) if len(parts) > 1 else 0
                if pending is not None:
                    inclusive[(fn, cfn)] += cost
                    calls[(fn, cfn)] += pending
                    pending = None
    return total, inclusive, calls


def main():
    path, delivered = sys.argv[1], int(sys.argv[2])
    total, inclusive, calls = parse(path)
    # The write pass task's poll, entered from the runtime (not from itself).
    in_pass = sum(
        c for (a, b), c in inclusive.items()
        if "write_pass::run" in b and "write_pass::run" not in a
    )
    visits = sum(
        n for (a, b), n in calls.items()
        if "write_pass::run" in a and "settle_written" in b
    )
    rest = total - in_pass
    print(f"deliveries {delivered}; write-pass visits {visits} "
          f"({visits / max(delivered, 1):.2f} per delivery)")
    print(f"outside the write pass: {rest / max(delivered, 1):.0f} instructions per delivery")
    if visits:
        print(f"write pass: {in_pass / visits:.0f} instructions per visit")


if __name__ == "__main__":
    main()
