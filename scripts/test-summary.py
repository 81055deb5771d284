#!/usr/bin/env python3
"""Read meson's testlog.json and say how the tests went.

  test-summary.py LOG...
      one closing line for one run (its logs from one or more build dirs):
      'tests: N passed, N failed, N skipped'
  test-summary.py --count LOG...
      for repeated runs (scripts/flake-hunt.sh): how many runs each test
      program and each GLib test case failed in, and the total

GLib test programs speak TAP, so every test case counts on its own (a program
of 12 cases is 12 tests); a program that is not TAP counts as one. A program
that failed counts as failed even where each case it printed said ok (it
crashed or timed out after them); such a failure is named after the last case
that passed, since the one that was running printed nothing.
"""
import json, re, signal, sys

OK = re.compile(r"^ok \d+(?: |$)(.*)")
NOT_OK = re.compile(r"^not ok \d+(?: |$)(.*)")


def read_log(path):
    """The entries of one testlog.json (one JSON object per line)."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def how_it_ended(t):
    """'FAIL', 'TIMEOUT', 'killed by signal 13 SIGPIPE', ..."""
    rc, result = t.get("returncode"), t.get("result", "?")
    if isinstance(rc, int) and rc < 0:
        try:
            return f"killed by signal {-rc} {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"{result}, exit status {rc}" if result == "FAIL" and rc else result


def program_result(t):
    """One program's counts and the names of its failed cases."""
    name, result = t.get("name", "?"), t.get("result", "")
    r = {"name": name, "passed": 0, "failed": 0, "skipped": 0, "failures": []}
    last_ok = None
    for line in (t.get("stdout") or "").splitlines():
        if (m := OK.match(line)):
            if "# SKIP" in m.group(1):
                r["skipped"] += 1
            else:
                r["passed"] += 1
                last_ok = m.group(1).strip()
        elif (m := NOT_OK.match(line)):
            if "# TODO" in m.group(1):
                r["skipped"] += 1
            else:
                r["failed"] += 1
                r["failures"].append(m.group(1).strip())
    if result == "SKIP":
        r["skipped"] = max(r["skipped"], 1)
    elif result not in ("OK", "EXPECTEDFAIL"):
        if r["failed"] == 0:
            r["failed"] = 1
            after = f" after {last_ok}" if last_ok else " before any case passed"
            r["failures"].append(f"({how_it_ended(t)}{after})")
    elif r["passed"] + r["failed"] + r["skipped"] == 0:
        r["passed"] = 1
    return r


def summary(paths):
    passed = failed = skipped = 0
    entries = [t for path in paths for t in read_log(path)]
    for t in entries:
        r = program_result(t)
        for f in r["failures"]:
            print(f"FAILED: {r['name']}{'' if f.startswith('(') else ':'} {f}")
        passed, failed, skipped = passed + r["passed"], failed + r["failed"], skipped + r["skipped"]
    print(f"{len(entries)} test programs")
    print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed or passed == 0 else 0


def count(paths):
    runs = len(paths)
    failed_runs = 0
    programs = {}   # name -> {"runs": n, "failed": n, "cases": {case: n}}
    for path in paths:
        run_failed = False
        for t in read_log(path):
            r = program_result(t)
            p = programs.setdefault(r["name"], {"runs": 0, "failed": 0, "cases": {}})
            p["runs"] += 1
            if r["failed"]:
                p["failed"] += 1
                run_failed = True
                for f in r["failures"]:
                    p["cases"][f] = p["cases"].get(f, 0) + 1
        failed_runs += run_failed
    width = len(str(runs))
    print(f"failures per test program (and per GLib test case) in {runs} runs:")
    for name in sorted(programs, key=lambda n: (-programs[n]["failed"], n)):
        p = programs[name]
        print(f"{p['failed']:>{width}}/{p['runs']:<{width}}  {name}")
        for case, n in sorted(p["cases"].items(), key=lambda c: (-c[1], c[0])):
            print(f"{n:>{width}}/{p['runs']:<{width}}    {case}")
    print(f"total: {failed_runs} of {runs} runs failed"
          f" ({sum(p['failed'] for p in programs.values())} program failures)")
    return 1 if failed_runs or runs == 0 else 0


def main(argv):
    try:
        if len(argv) >= 2 and argv[0] == "--count":
            return count(argv[1:])
        if len(argv) >= 1 and not argv[0].startswith("-"):
            return summary(argv)
    except (OSError, ValueError) as e:
        print(f"test-summary: cannot read the test log: {e}", file=sys.stderr)
        return 1
    print("usage: test-summary.py LOG... | test-summary.py --count LOG...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
