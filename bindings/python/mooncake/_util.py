# SPDX-License-Identifier: Apache-2.0
"""Argument checking shared by the modules of the package.

Size strings follow libmooncake's ``mc_parse_size()`` (and upstream): a
decimal number, optional spaces, an optional unit; ``k``/``kb``/``kib``
and friends all mean powers of 1024.  Anything else -- a percentage, a sign,
an unknown unit -- is a :class:`ValueError`.

This is the grammar of upstream's C++ parser (``try_string_to_byte_size``,
used by ``setup(dict)`` and ``mooncake_client``), which accepts the
``B K KB M MB G GB T TB`` units; ours also takes the ``KiB``... spellings
that ``mc_parse_size`` (master flags) accepts, and not upstream's literal
``infinite`` (no setup size can be 2**64-1 bytes anyway).  Upstream's
*Python* config parser is a different grammar (floats with exponents, no
space-separated ``MiB``) and lives with its only user,
:mod:`mooncake.mooncake_config`.

May import: the standard library only: every module of the package may
import it.
"""

import re
from typing import Any, Union

U64_MAX = (1 << 64) - 1
U32_MAX = (1 << 32) - 1

_UNITS = {
    "": 1, "b": 1,
    "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
    "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
    "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
    "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}

_SIZE_RE = re.compile(r"\s*([0-9]+)(\.[0-9]*)?\s*([A-Za-z]*)\s*", re.ASCII)


def is_int(value: Any) -> bool:
    """True for ints (and int subclasses such as numpy's), False for bools."""
    return isinstance(value, int) and not isinstance(value, bool)


def parse_size(text: str) -> int:
    """Bytes in a size string: ``"16MB"``, ``"16 MB"``, ``"1.5GiB"``, ``"512k"``.

    Raises :class:`ValueError` for anything else (``"50%"``, ``"-1"``, ``""``).
    """
    m = _SIZE_RE.fullmatch(text)
    if m is None:
        raise ValueError(f"invalid size {text!r}: expected a number with an optional "
                         "unit such as '16MB' or '1 GiB'")
    whole, frac, unit = m.groups()
    mult = _UNITS.get(unit.lower())
    if mult is None:
        raise ValueError(f"invalid size {text!r}: unknown unit {unit!r}")
    if frac is not None:
        value = int(float(whole + frac) * mult)
    else:
        value = int(whole) * mult
    if value > U64_MAX:
        raise ValueError(f"invalid size {text!r}: larger than 2**64-1 bytes")
    return value


def check_size(name: str, value: Any) -> int:
    """A byte count given as an int: TypeError unless 0 <= value < 2**64."""
    if not is_int(value):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 0 or value > U64_MAX:
        raise TypeError(f"{name} must be in [0, 2**64-1], got {value}")
    return int(value)


def size_arg(name: str, value: Any) -> int:
    """A byte count given as an int or a size string (the dict overload of setup)."""
    if isinstance(value, str):
        return parse_size(value)
    return check_size(name, value)


def check_str(name: str, value: Any) -> str:
    """A str argument: TypeError otherwise."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    return value


def check_bool(name: str, value: Any) -> bool:
    """A bool argument (ints 0/1 are accepted too): TypeError otherwise."""
    if isinstance(value, bool):
        return value
    if is_int(value) and value in (0, 1):
        return bool(value)
    raise TypeError(f"{name} must be a bool, not {type(value).__name__}")


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def bool_arg(name: str, value: Union[bool, str]) -> bool:
    """A bool or a boolean word ("true", "off", ...) from a config dict."""
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
        raise ValueError(f"{name}: invalid boolean {value!r}")
    return check_bool(name, value)


def check_key(key: Any) -> str:
    """An object key: a str without NUL characters."""
    if not isinstance(key, str):
        raise TypeError(f"key must be a str, not {type(key).__name__}")
    if "\0" in key:
        raise ValueError("key contains a NUL character")
    return key


def check_key_list(name: str, keys: Any) -> list:
    """A list or tuple of keys (the native layer checks every item)."""
    if isinstance(keys, (str, bytes, bytearray)) or not isinstance(keys, (list, tuple)):
        raise TypeError(f"{name} must be a list of str, not {type(keys).__name__}")
    return keys


def as_buffer(value: Any) -> Any:
    """``value`` as an object exporting one C-contiguous buffer, without a copy
    unless the caller's buffer is strided (then one contiguous copy is made).
    TypeError for anything that is not bytes-like (str included)."""
    if isinstance(value, (bytes, bytearray)):
        return value
    if isinstance(value, str):
        raise TypeError("value must be a bytes-like object, not str (encode it first)")
    try:
        view = memoryview(value)
    except TypeError:
        raise TypeError(f"value must be a bytes-like object, not {type(value).__name__}") \
            from None
    if view.c_contiguous:
        return value
    return view.tobytes()
