# SPDX-License-Identifier: Apache-2.0
"""Store-key helpers shared by the layers that lay out keys under a
prefix (private).

Owns: the check and normalisation of a ``key_prefix``
(:func:`_normalize_key_prefix`) and the escaping of a key for the
``remove_by_regex`` / ``*_by_regex`` calls (:func:`_ere_escape`).

Used by :mod:`mooncake.structured_object_store` and
:mod:`mooncake.reshard.weight` (``store``, ``store_layout``), which both
name keys ``{key_prefix}/...``; kept here so that neither imports the
other.  May import: the standard library only.
"""


def _normalize_key_prefix(prefix: object) -> str:
    if not isinstance(prefix, str):
        raise TypeError(f"key_prefix must be a str, not {type(prefix).__name__}")
    p = prefix.strip("/")
    if not p or any(ord(c) < 32 or ord(c) == 127 for c in p):
        raise ValueError(f"key_prefix {prefix!r} must be non-empty without control characters")
    return p


def _ere_escape(text: str) -> str:
    """``text`` as a POSIX extended regular expression matching itself."""
    return "".join("\\" + c if c in ".[]{}()\\*+?^$|" else c for c in text)
