#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Write mooncake-master/mooncake-master.conf from mooncake-master/flags.h.

The commented reference of every flag is generated, so it never drifts
from the flag table: each visible flag becomes its help text (the words
--help adds for refused and compatibility-only flags included), its type
and a "name = default" line, under the table's section headings; the
file's own introduction (everything before the first heading) is kept.

    scripts/gen_master_conf.py [--check]

--check writes nothing and exits 1 when the file is out of date
(tests/python/test_master_process.py runs it).
"""
import argparse
import re
import sys
import textwrap
from pathlib import Path

TOP = Path(__file__).resolve().parent.parent
FLAGS_H = TOP / "mooncake-master" / "flags.h"
CONF = TOP / "mooncake-master" / "mooncake-master.conf"

TYPES = {"STRING": "string", "INT": "int", "BOOL": "bool", "DOUBLE": "double",
         "DURATION": "duration", "SIZE": "size"}
REFUSE = "(not implemented yet: any value but the default refuses to start)"
COMPAT = "(accepted for compatibility only; no effect)"
LATER = "(arrives in a later release)"


def c_string(body: str) -> str:
    """The value of adjacent C string literals."""
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"', body)
    return "".join(bytes(p, "utf-8").decode("unicode_escape").encode("latin-1").decode("utf-8")
                   for p in parts)


def entries():
    """(section, type, name, default, flags, help) per X(...) of the table,
    sections as (None, ..., heading)."""
    text = FLAGS_H.read_text()
    start = text.index("#define MC_MASTER_FLAGS(X)")
    body = text[start:]
    body = body[:body.index("\n\n")]
    body = body.replace("\\\n", "\n")
    items = []
    for m in re.finditer(r'/\* ---- (.*?) ---- \*/|X\((\w+),\s*(\w+),\s*("(?:[^"\\]|\\.)*"),'
                         r'\s*(\w+),\s*([^,]+),((?:\s*"(?:[^"\\]|\\.)*")+)\s*\)', body):
        if m.group(1) is not None:
            items.append(("section", m.group(1)))
        else:
            items.append(("flag", m.group(2), m.group(3), c_string(m.group(4)),
                          m.group(6).strip(), c_string(m.group(7))))
    return items


def render(intro: str) -> str:
    out = [intro.rstrip("\n") + "\n"]
    for it in entries():
        if it[0] == "section":
            out.append(f"\n# ---- {it[1]} ----\n")
            continue
        _, typ, name, default, flags, help_ = it
        if "MC_FLAG_HIDDEN" in flags or name in ("help", "version"):
            continue
        text = help_
        if "MC_FLAG_REFUSE" in flags:
            text += " " + REFUSE
        if "MC_FLAG_COMPAT" in flags:
            text += " " + COMPAT
        if "MC_FLAG_LATER" in flags:
            text += " " + LATER
        text += f" [{TYPES[typ]}]"
        wrapped = textwrap.wrap(text, width=78, initial_indent="# ", subsequent_indent="# ",
                                break_long_words=False, break_on_hyphens=False)
        value = default if default != "" else '""'
        out.append("\n" + "\n".join(wrapped) + f"\n{name} = {value}\n")
    return "".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the file is out of date")
    args = ap.parse_args()
    old = CONF.read_text()
    intro = old[:old.index("\n# ---- ")]
    new = render(intro)
    if args.check:
        if new != old:
            print(f"{CONF} is out of date: run scripts/gen_master_conf.py", file=sys.stderr)
            return 1
        return 0
    CONF.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
