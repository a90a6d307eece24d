# SPDX-License-Identifier: Apache-2.0
"""Ranged reads over TCP (MC_TE_SHM=0) from a holder in another process,
whose regular rows go as strided gathered reads (READV_STRIDED,
docs/transfer.md §3.3): the rows of two objects interleaved into whole
destination rows (a group of two entries), the half rows of one object at
twice their length apart (a column block of a stored row), into a
contiguous destination and into one that is itself strided, with
irregular ranges beside them.  Every byte lands exactly; a holder with
MC_TE_READV_STRIDED=0 (its descriptor does not offer it, as an earlier
release) is read as READVs with the same bytes, and so is any holder by a
reader with MC_TE_READV_STRIDED=0."""
import numpy as np
import pytest

from helpers import holder_objects

ROW = 1024
NROW = 300  # rows per object: several reads of the slice size


def _reads(keys):
    """The ranges of one read_ranges call over the objects of ``keys``
    (each NROW * 2 * ROW bytes, in the order a, b, c, d): a and b
    interleaved row by row into contiguous rows of 2 * ROW; the first half
    of each of c's rows (stride 2 * ROW) into contiguous half rows; d's
    second halves into every third half-row slot (a strided destination);
    and a handful of irregular ranges of a.  Returns (kidx, dst, src,
    lens, the destination's size)."""
    kidx, dst, src, lens = [], [], [], []

    def add(k, d, s, n):
        kidx.append(k), dst.append(d), src.append(s), lens.append(n)

    at = 0
    for r in range(NROW):                 # a | b
        add(0, at + r * 2 * ROW, r * ROW, ROW)
        add(1, at + r * 2 * ROW + ROW, r * ROW, ROW)
    at += NROW * 2 * ROW + 64
    for r in range(NROW):                 # c's first halves, back to back
        add(2, at + r * (ROW // 2), r * 2 * ROW, ROW // 2)
    at += NROW * (ROW // 2) + 64
    for r in range(NROW):                 # d's second halves, every third slot
        add(3, at + r * 3 * (ROW // 2), r * 2 * ROW + ROW + ROW // 2, ROW // 2)
    at += NROW * 3 * (ROW // 2) + 64
    for i in range(17):                   # irregular
        add(0, at, (i * i * 37) % (NROW * ROW - 900), 1 + (i * 53) % 900)
        at += lens[-1] + 3
    return (np.array(kidx, np.int64), np.array(dst, np.int64), np.array(src, np.int64),
            np.array(lens, np.int64), at + 64)


def _check_exact(reader, regbuf, keys, values):
    kidx, dst, src, lens, size = _reads(keys)
    buf = regbuf(reader, size, fill=0xAA)
    bufs = np.full(len(kidx), buf.ctypes.data, np.int64)
    covered = np.zeros(size, bool)
    want = np.full(size, 0xAA, np.uint8)
    for k, d, s, n in zip(kidx.tolist(), dst.tolist(), src.tolist(), lens.tolist()):
        covered[d:d + n] = True
        want[d:d + n] = np.frombuffer(values[k][s:s + n], np.uint8)
    for _ in range(3):
        buf[:] = 0xAA
        res = np.frombuffer(reader._store.read_ranges(keys, bufs, dst, src, lens, 1, kidx),
                            np.int64)
        assert (res == lens).all(), sorted(set(res.tolist()))
        bad = np.flatnonzero(buf != want)
        assert len(bad) == 0, (f"{len(bad)} bytes wrong, first at {bad[0]} "
                               f"({'inside' if covered[bad[0]] else 'outside'} the ranges)")


def _run(master, make_store, regbuf, monkeypatch, holder_env, reader_env):
    with holder_objects(master, make_store, monkeypatch, "holder-strided", "strided",
                        holder_env, reader_env, NROW * 2 * ROW) as (reader, keys, values):
        _check_exact(reader, regbuf, keys, values)


def test_strided_rows_exact(master, make_store, regbuf, monkeypatch):
    _run(master, make_store, regbuf, monkeypatch, {}, {})


@pytest.mark.parametrize("side", ["holder", "reader"])
def test_strided_off_reads_same_bytes(master, make_store, regbuf, monkeypatch, side):
    """MC_TE_READV_STRIDED=0 at the holder (it leaves "tcp_readv_strided"
    out of its descriptor and would close a connection that sent one) or
    at the reader: the same reads as READVs, every byte exact."""
    off = {"MC_TE_READV_STRIDED": "0"}
    _run(master, make_store, regbuf, monkeypatch, off if side == "holder" else {},
         off if side == "reader" else {})
