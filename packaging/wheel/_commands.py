# SPDX-License-Identifier: Apache-2.0
"""Console commands of the pip wheel: the native daemons.

The wheel (packaging/wheel.mk) carries mooncake_master, mooncake_client and
mooncake_http_metadata_server as executables in ``mooncake/bin/``, where pip
installs them with the package, and declares one console command per daemon
pointing here.  Each command replaces the Python process with the daemon
(``os.execv``): the daemon keeps the command's pid, so a supervisor's or a
test's SIGTERM reaches it directly and its exit status is the command's.

This module exists only in the wheel; the Debian packages install the
daemons in /usr/bin.
"""

import os
import sys

_BIN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin")


def _exec(name: str) -> int:
    """Run the packaged daemon NAME with this command's arguments; return
    only on failure (127, the shell's "cannot run" status)."""
    path = os.path.join(_BIN_DIR, name)
    try:
        os.execv(path, [name] + sys.argv[1:])
    except OSError as e:
        sys.stderr.write(f"{name}: cannot run the packaged daemon {path}: {e.strerror}\n")
    return 127


def mooncake_master() -> int:
    """The ``mooncake_master`` command."""
    return _exec("mooncake_master")


def mooncake_client() -> int:
    """The ``mooncake_client`` command."""
    return _exec("mooncake_client")


def mooncake_http_metadata_server() -> int:
    """The ``mooncake_http_metadata_server`` command (the native server; the
    aiohttp one stays importable as ``mooncake.http_metadata_server``)."""
    return _exec("mooncake_http_metadata_server")
