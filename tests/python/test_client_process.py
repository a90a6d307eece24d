# SPDX-License-Identifier: Apache-2.0
"""mooncake_client as an installed program: its man page documents every
flag its --help lists."""

import re
import subprocess

from helpers import SRCDIR, client_bin


def test_man_page_lists_every_flag():
    man = (SRCDIR / "docs/man/mooncake_client.1").read_text().replace("\\-", "-")
    out = subprocess.run([client_bin(), "--help"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    flags = [f for f in re.findall(r"--(\w+)=", out.stdout) if f != "flag"]
    assert len(set(flags)) == 18, flags
    options = man.split(".SH OPTIONS", 1)[1].split(".SH", 1)[0]
    for f in flags:
        assert f".BR --{f} " in options, f"the man page's OPTIONS lack --{f}"
