# SPDX-License-Identifier: Apache-2.0
"""Bad arguments get errors that say what is wrong.

* A key (or regex) str that is not valid UTF-8 -- a lone surrogate, as a
  non-UTF-8 file name decoded with surrogateescape gives -- raises
  ValueError naming the argument, not SWIG's "argument 2 of type
  'char const *'"; a list of keys names the bad item.
* setup() with a 2**62-byte segment returns INVALID_PARAMS (-600), and the
  detail says it is larger than the host's memory.
* alloc_from_mem_pool(2**62) returns 0 as the spec says, and logs why on
  the ``mooncake.store`` logger (larger than the whole local buffer).
"""

import logging

import pytest

from helpers import MiB

INVALID_PARAMS = -600
BAD = "key-\udcff"


@pytest.mark.parametrize("call", [
    lambda s: s.put(BAD, b"x"), lambda s: s.get(BAD), lambda s: s.is_exist(BAD),
    lambda s: s.remove(BAD), lambda s: s.get_size(BAD), lambda s: s.upsert(BAD, b"x"),
])
def test_non_utf8_key_raises_naming_the_argument(store, call):
    with pytest.raises(ValueError) as e:
        call(store)
    msg = str(e.value)
    assert "key is not valid UTF-8" in msg, msg
    assert "char const" not in msg


def test_non_utf8_regex_raises_naming_the_argument(store):
    with pytest.raises(ValueError, match="regex is not valid UTF-8"):
        store.remove_by_regex(BAD)


@pytest.mark.parametrize("call", [
    lambda s: s.put_batch(["ok", BAD], [b"a", b"b"]), lambda s: s.get_batch(["ok", BAD]),
    lambda s: s.batch_is_exist(["ok", BAD]), lambda s: s.batch_remove(["ok", BAD]),
])
def test_non_utf8_key_in_a_list_names_the_item(store, call):
    with pytest.raises(ValueError, match="list item 1 is not valid UTF-8"):
        call(store)


def test_setup_with_a_huge_segment_is_invalid_params(master):
    from mooncake.store import MooncakeDistributedStore, last_error_detail
    s = MooncakeDistributedStore()
    try:
        rc = s.setup("localhost", "P2PHANDSHAKE", 2**62, 16 * MiB, "tcp", "", master.addr)
        assert rc == INVALID_PARAMS, rc
        assert "larger than this host's memory" in last_error_detail()
    finally:
        s.close()


def test_alloc_from_mem_pool_too_large_returns_0_and_says_why(store, caplog):
    with caplog.at_level(logging.WARNING, logger="mooncake.store"):
        assert store.alloc_from_mem_pool(2**62) == 0
    assert any("larger than the whole local buffer" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]
    p = store.alloc_from_mem_pool(4096)         # a sane size still works
    assert p != 0
    assert store._mem_pool_free(p) == 0
