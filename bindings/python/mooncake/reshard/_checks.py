# SPDX-License-Identifier: Apache-2.0
"""Field checks shared by the resharding contracts.

Upstream's contracts refuse every malformed value with a ValueError whose
message names the field; these helpers keep those messages in one place so
that every class words them alike ("nbytes must be an integer", "... must be
at least 1", "... must fit in an unsigned 64-bit integer").  Types are
checked exactly: a bool is not an integer and a str is not a sequence.

May import: the standard library only (the bottom of reshard).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence as _Sequence
from typing import Any, Optional, Tuple

U64_MAX = (1 << 64) - 1


def check_int(name: str, value: Any, minimum: Optional[int] = None) -> int:
    if type(value) is not int:
        raise ValueError(f"{name} must be an integer")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}")
    return value


def check_u64(name: str, value: Any, minimum: int = 0) -> int:
    check_int(name, value, minimum)
    if value > U64_MAX:
        raise ValueError(f"{name} must fit in an unsigned 64-bit integer")
    return value


def check_optional_int(name: str, value: Any, minimum: int = 0) -> Optional[int]:
    return None if value is None else check_int(name, value, minimum)


def check_str(name: str, value: Any) -> str:
    if type(value) is not str or not value:
        raise ValueError(f"{name} must be a non-empty string")
    return value


def check_sequence(name: str, value: Any) -> Tuple[Any, ...]:
    """Any non-string Sequence (list, tuple) as a tuple; sets, dicts and
    generators are refused because their order is not the caller's."""
    if isinstance(value, (str, bytes)) or not isinstance(value, _Sequence):
        raise ValueError(f"{name} must be a sequence")
    return tuple(value)


def check_ints(name: str, value: Any, minimum: int) -> Tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, _Sequence):
        raise ValueError(f"{name} must contain integers")
    out = tuple(value)
    for v in out:
        if type(v) is not int:
            raise ValueError(f"{name} must contain integers")
        if v < minimum:
            raise ValueError(f"{name} must be at least {minimum}")
    return out


def check_instances(name: str, value: Any, cls: type, what: str) -> Tuple[Any, ...]:
    out = check_sequence(name, value)
    for v in out:
        if not isinstance(v, cls):
            raise ValueError(f"{what} must contain {cls.__name__}")
    return out


def canonical_json(obj: Any) -> str:
    """The one text form hashed for ids and digests (sorted keys, compact,
    ASCII, tuples as arrays)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def canonical_id(obj: Any) -> str:
    return "sha256:" + sha256_hex(canonical_json(obj))


def is_sha256_hex(value: Any) -> bool:
    return (type(value) is str and len(value) == 64
            and all(c in "0123456789abcdef" for c in value))


def volume(shape: Tuple[int, ...]) -> int:
    return math.prod(shape)


def c_strides(shape: Tuple[int, ...], itemsize: int) -> Tuple[int, ...]:
    """Byte strides of a C-contiguous array of this shape."""
    out = [0] * len(shape)
    step = itemsize
    for i in range(len(shape) - 1, -1, -1):
        out[i] = step
        step *= shape[i]
    return tuple(out)


# --- strict JSON parsing (placement and stored-manifest serde) -------------

def _no_duplicates(label: str):
    def hook(pairs):
        out = {}
        for k, v in pairs:
            if k in out:
                raise ValueError(f"{label}duplicate JSON field: {k}")
            out[k] = v
        return out
    return hook


def _no_constant(label: str):
    def hook(name):
        raise ValueError(f"{label}non-finite JSON number is unsupported: {name}")
    return hook


def load_json(raw: Any, what: str, label_prefix: str = "") -> dict:
    """Parse `raw` (str or bytes) refusing duplicate keys and NaN/Infinity;
    the result must be an object."""
    if isinstance(raw, (bytes, bytearray, memoryview)):
        try:
            raw = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{what} is not valid JSON") from None
    if type(raw) is not str:
        raise ValueError(f"{what} is not valid JSON")
    try:
        doc = json.loads(raw, object_pairs_hook=_no_duplicates(label_prefix),
                         parse_constant=_no_constant(label_prefix))
    except json.JSONDecodeError:
        raise ValueError(f"{what} is not valid JSON") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{what} must be a JSON object")
    return doc


def check_keys(label: str, obj: Any, keys, optional=()) -> dict:
    if not isinstance(obj, dict):
        raise ValueError(f"{label} schema fields do not match contract")
    have = set(obj)
    if not set(keys) <= have or not have <= set(keys) | set(optional):
        raise ValueError(f"{label} schema fields do not match contract")
    return obj


def json_int(name: str, value: Any, minimum: int) -> int:
    if type(value) is not int or value < minimum:
        raise ValueError(f"{name} must be an integer at least {minimum}")
    return value
