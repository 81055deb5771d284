#!/usr/bin/env python3
"""Print meson's results as one closing line: 'tests: N passed, N failed, N skipped'.

GLib test programs speak TAP, so every test case counts on its own (a program
of 12 cases is 12 tests); a program that is not TAP counts as one. A program
that failed counts as failed even where each case it printed said ok (it
crashed or timed out after them).
"""
import json, re, sys

OK = re.compile(r"^ok \d+(?: |$)(.*)")
NOT_OK = re.compile(r"^not ok \d+(?: |$)(.*)")

passed = failed = skipped = programs = 0
failures = []
try:
    with open(sys.argv[1]) as f:
        entries = [json.loads(line) for line in f if line.strip()]
except (OSError, ValueError) as e:
    print(f"test-summary: cannot read {sys.argv[1]}: {e}", file=sys.stderr)
    sys.exit(1)

for t in entries:
    programs += 1
    name, result = t.get("name", "?"), t.get("result", "")
    p = fl = sk = 0
    for line in (t.get("stdout") or "").splitlines():
        if (m := OK.match(line)):
            if "# SKIP" in m.group(1):
                sk += 1
            else:
                p += 1
        elif (m := NOT_OK.match(line)):
            if "# TODO" in m.group(1):
                sk += 1
            else:
                fl += 1
                failures.append(f"{name}: {m.group(1).strip()}")
    if result == "SKIP":
        sk = max(sk, 1)
    elif result not in ("OK", "EXPECTEDFAIL"):
        if fl == 0:
            fl = 1
            failures.append(f"{name} ({result})")
    elif p + fl + sk == 0:
        p = 1
    passed, failed, skipped = passed + p, failed + fl, skipped + sk

for f in failures:
    print(f"FAILED: {f}")
print(f"{programs} test programs")
print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed or passed == 0 else 0)
