#!/usr/bin/env python3
"""Every language in po/LINGUAS translates every string the sources have now.

Extracts the strings from the files in POTFILES.in the way meson's
i18n.gettext(preset: 'glib') does, merges each LANG.po with them and fails
naming each language with untranslated or fuzzy messages.
Usage: check-translations.py SOURCE_ROOT
"""
import os
import re
import subprocess
import sys
import tempfile

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
po_dir = os.path.join(root, "po")
keywords = ["_", "N_", "C_:1c,2", "NC_:1c,2", "g_dcgettext:2", "g_dngettext:2,3",
            "g_dpgettext2:2c,3"]
flags = ["N_:1:pass-c-format", "C_:2:pass-c-format", "NC_:2:pass-c-format",
         "g_dngettext:2:pass-c-format", "g_strdup_printf:1:c-format",
         "g_string_printf:2:c-format", "g_string_append_printf:2:c-format",
         "g_error_new:3:c-format", "g_set_error:4:c-format"]

with open(os.path.join(po_dir, "LINGUAS")) as f:
    languages = [w for line in f for w in line.split() if not line.startswith("#")]
if not languages:
    print("po/LINGUAS lists no language")
    sys.exit(1)

problems = []
with tempfile.TemporaryDirectory() as tmp:
    pot = os.path.join(tmp, "rlx-cluster.pot")
    subprocess.run(["xgettext", "--package-name=rlx-cluster", "-p", tmp, "-o", "rlx-cluster.pot",
                    "-D", root, "-f", os.path.join(po_dir, "POTFILES.in"), "--from-code=UTF-8",
                    "--add-comments"] + [f"--keyword={k}" for k in keywords]
                   + [f"--flag={f}" for f in flags], check=True)
    for lang in languages:
        merged = os.path.join(tmp, lang + ".po")
        subprocess.run(["msgmerge", "--quiet", "--no-fuzzy-matching", "-o", merged,
                        os.path.join(po_dir, lang + ".po"), pot], check=True)
        out = subprocess.run(["msgfmt", "--check", "--statistics", "-o", os.devnull, merged],
                             capture_output=True, text=True)
        stats = (out.stdout + out.stderr).strip()
        if out.returncode != 0:
            problems.append(f"{lang}.po does not compile: {stats}")
        elif re.search(r"\b(untranslated|fuzzy)\b", stats):
            problems.append(f"{lang}.po is incomplete ({stats}): run `ninja -C build rlx-cluster-update-po` "
                            f"and translate the new messages")
        print(f"{lang}: {stats}")
for p in problems:
    print(p)
sys.exit(1 if problems else 0)
