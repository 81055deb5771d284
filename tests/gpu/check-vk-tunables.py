#!/usr/bin/env python3
"""check-vk-tunables.py SOURCE_ROOT — the Vulkan backend's environment
switches are read in one place and documented in one table.

- No file of gpu/ but rlx-vk-tunables.c reads the environment.
- Every variable rlx-vk-tunables.c reads is in its table
  (rlx_vk_tunable_docs), once, with a default and a description.
- Every variable in the table is read: by rlx-vk-tunables.c, or (for the
  ones that decide above the device, RLX_VK_RESIDENT) somewhere in core/.
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else '.')
gpu = root / 'gpu'
failures = []

READS = re.compile(r'\b(?:g_)?getenv\s*\(')
for path in sorted(gpu.glob('*.[ch]')):
    if path.name == 'rlx-vk-tunables.c':
        continue
    text = path.read_text()
    for n, line in enumerate(text.split('\n'), 1):
        if READS.search(line):
            failures.append(f'{path.relative_to(root)}:{n} reads the environment; '
                            'read it in gpu/rlx-vk-tunables.c and list it in its table')

tun = (gpu / 'rlx-vk-tunables.c').read_text()
split = tun.index('const RlxVkTunableDoc rlx_vk_tunable_docs[]')
code, table = tun[:split], tun[split:]
NAME = r'"(RLX_VK_[A-Z0-9_]+|RLX_VULKAN_[A-Z0-9_]+)"'
entries = re.findall(r'\{\s*' + NAME + r',\s*"([^"]*)",\s*((?:"(?:[^"\\]|\\.)*"\s*)+)\}', table)
documented = [e[0] for e in entries]
read = set(re.findall(NAME, code))

if not entries:
    failures.append('gpu/rlx-vk-tunables.c: no entries found in rlx_vk_tunable_docs')
for name in sorted({n for n in documented if documented.count(n) > 1}):
    failures.append(f'{name} is in the table more than once')
for name, dflt, desc in entries:
    if not dflt.strip() or len(desc.strip()) < 10:
        failures.append(f'{name}: the table needs a default and a description')
for name in sorted(read - set(documented)):
    failures.append(f'{name} is read in gpu/rlx-vk-tunables.c but not in its table')

core = '\n'.join(p.read_text() for p in sorted((root / 'core').rglob('*.c')))
for name in documented:
    if name not in read and f'"{name}"' not in core:
        failures.append(f'{name} is in the table, but nothing in gpu/rlx-vk-tunables.c '
                        'or core/ reads it')

for f in failures:
    print('check-vk-tunables:', f, file=sys.stderr)
if failures:
    sys.exit(1)
print(f'check-vk-tunables: {len(documented)} switches, each read and documented once')
