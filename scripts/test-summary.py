#!/usr/bin/env python3
"""Print meson's test results as one closing line: 'tests: N passed, N failed, N skipped'."""
import json, sys

counts = {"passed": 0, "failed": 0, "skipped": 0}
failed = []
try:
    with open(sys.argv[1]) as f:
        for line in f:
            if not line.strip():
                continue
            t = json.loads(line)
            r = t.get("result", "")
            if r in ("OK", "EXPECTEDFAIL"):
                counts["passed"] += 1
            elif r == "SKIP":
                counts["skipped"] += 1
            else:
                counts["failed"] += 1
                failed.append(f'{t.get("name")} ({r})')
except OSError as e:
    print(f"test-summary: cannot read {sys.argv[1]}: {e}", file=sys.stderr)
    sys.exit(1)
for name in failed:
    print(f"FAILED: {name}")
print(f'tests: {counts["passed"]} passed, {counts["failed"]} failed, {counts["skipped"]} skipped')
sys.exit(1 if counts["failed"] or counts["passed"] == 0 else 0)
