# SPDX-License-Identifier: Apache-2.0
"""The C allocator's thresholds, set once per process at the first setup.

``get``, ``get_batch`` and the tensor reads return a new ``bytes`` (or
``bytearray``) per value, and CPython takes its storage from the C
``malloc``. glibc serves a request above its mmap threshold (128 KiB until
it raises it) with fresh pages, and gives the top of its heap back to the
kernel once more than its trim threshold (twice the mmap threshold) is free
there. A loop of 1 MiB gets then keeps handing the kernel back the very
pages the next get needs, and every fresh page is a page fault inside the
read: 256 of them for 1 MiB, 2.7-3.5 ms on the development VM against about
0.3 ms for the read itself (docs/transfer.md §9).

So the first setup of a store in a process sets what glibc itself settles
on once the process has freed a block of 32 MiB: an mmap threshold of
32 MiB (its largest automatic value on 64-bit) and a trim threshold of
twice that.  Values under 32 MiB then come from the heap, and up to 64 MiB
of free heap stays mapped for the next value instead of being faulted in
again.

``MC_PY_MALLOC_TUNE=0`` leaves the allocator alone (``1``, the default,
tunes it, as does an empty value; anything else fails setup with
``INVALID_PARAMS``). A process that chose its own thresholds
(``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``,
``MALLOC_TOP_PAD_``, ``MALLOC_MMAP_MAX_`` or a ``glibc.malloc`` tunable in
``GLIBC_TUNABLES``) keeps them, and so does one whose C library is not
glibc.

May import: the standard library and ctypes only (mooncake.store calls it).
"""

import ctypes
import os
import threading
from typing import Optional

ENV = "MC_PY_MALLOC_TUNE"
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD

# mallopt parameters (<malloc.h>)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

_USER_VARS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
              "MALLOC_MMAP_MAX_")
_USER_TUNABLES = ("glibc.malloc.mmap_threshold", "glibc.malloc.trim_threshold",
                  "glibc.malloc.top_pad", "glibc.malloc.mmap_max")

_lock = threading.Lock()
_done = False


def setting_error() -> Optional[str]:
    """Why ``MC_PY_MALLOC_TUNE`` is refused, or None when it is valid."""
    value = os.environ.get(ENV)
    if not value or value in ("0", "1"):  # unset or empty: the default
        return None
    return f"{ENV}={value!r}: expected 0 (leave the allocator alone) or 1 (tune it)"


def _user_chose() -> bool:
    if any(v in os.environ for v in _USER_VARS):
        return True
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    return any(t in tunables for t in _USER_TUNABLES)


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc ")
    except (ValueError, OSError, AttributeError):
        return False


def tune_once() -> bool:
    """Set the thresholds unless turned off, chosen by the process, already
    set, or not glibc's.  Call only after setting_error() returned None.
    True when this call set them."""
    global _done
    with _lock:
        if _done:
            return False
        _done = True
        if os.environ.get(ENV) == "0" or _user_chose() or not _glibc():
            return False
        mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
        if mallopt is None:
            return False
        mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
        mallopt.restype = ctypes.c_int
        # trim first: mallopt(M_MMAP_THRESHOLD) alone would freeze the trim
        # threshold at its 128 KiB default
        return bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)) and \
            bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
