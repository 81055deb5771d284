#!/usr/bin/env python3
"""The app and rlx-rank's printer switch on typed events (core/event/rlx-event.h):
no file of app/ (nor tools/cmd-join.c) reads an event's name out of JSON or
compares a string with an event's name. Usage: check-typed-events.py SOURCE_ROOT"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
table = (root / "core/event/rlx-event.c").read_text()
names = re.findall(r'K \(RLX_EVENT_\w+, "([a-z-]+)"', table)
if len(names) < 20:
    sys.exit(f"found only {len(names)} event kinds in core/event/rlx-event.c's table")

files = sorted((root / "app").glob("*.c")) + [root / "tools/cmd-join.c"]
compare = re.compile(r'\b(g_str_equal|g_strcmp0|strcmp|g_str_has_prefix)\s*\(([^;]*)')
bad = []
for f in files:
    for n, line in enumerate(f.read_text().splitlines(), 1):
        code = line.split("/*")[0]
        if code.lstrip().startswith("*"):
            continue   # a comment's continuation
        # the JSON "event" member: only a signal's or a property's name, or
        # written (rlx-rank export's own line)
        if '"event"' in code and not re.search(r'g_signal_connect|g_param_spec|member_name|'
                                               r'set_string_member|strcmp \(key, "event"\)',
                                               code):
            bad.append(f"{f.relative_to(root)}:{n}: reads the \"event\" member: {line.strip()}")
        m = compare.search(code)
        if m and "state" not in m.group(2):
            for name in names:
                if f'"{name}"' in m.group(2):
                    bad.append(f"{f.relative_to(root)}:{n}: compares with the event name "
                               f"\"{name}\" (switch on RlxEvent.kind): {line.strip()}")
if bad:
    print("\n".join(bad))
    sys.exit(1)
print(f"{len(files)} files, {len(names)} event kinds: no event matched by name")
