# SPDX-License-Identifier: Apache-2.0
"""Status codes of libmooncake, generated from its C status table.

The numbers are the upstream Mooncake ``ErrorCode`` values (0 OK, -704
OBJECT_NOT_FOUND, ...).  They are not copied here: :class:`ErrorCode` is
built at import time by enumerating ``MC_STATUS_TABLE`` through the native
binding, so Python and C cannot drift apart.  Every code is also a module
constant (``OBJECT_NOT_FOUND == -704``).

May import: the native binding (capi) only: it is the bottom layer with
_util.
"""

import enum
from typing import List

from mooncake import capi as _capi


def _table() -> List[tuple]:
    values = [_capi.mooncake_status_value(i) for i in range(_capi.mooncake_status_count())]
    return [(_capi.mc_status_name(v), v) for v in values]


#: Every status of libmooncake as an ``int`` enumeration.  Methods of the
#: store return plain ints; compare them with these members
#: (``rc == ErrorCode.OBJECT_NOT_FOUND``) or wrap them (``ErrorCode(rc)``).
ErrorCode = enum.IntEnum("ErrorCode", _table(), module=__name__, qualname="ErrorCode")
ErrorCode.__doc__ = "Status codes of libmooncake (the upstream ErrorCode numbers)."

globals().update(ErrorCode.__members__)


def describe(code: int) -> str:
    """Human description of a status, e.g. ``describe(-704) == "object not found"``."""
    return _capi.mc_status_string(int(code))


def last_error_detail() -> str:
    """What the last failing libmooncake call on this thread recorded ("" if nothing)."""
    return _capi.mc_last_error_detail()


__all__ = ["ErrorCode", "describe", "last_error_detail", *ErrorCode.__members__]
