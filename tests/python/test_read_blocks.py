# SPDX-License-Identifier: Apache-2.0
"""Strided blocks of a ranged read (mc_store_read_blocks, the bindings'
read_blocks): a block of rows of one stored object landing in a block of
rows of one destination, one descriptor however many rows.  Over TCP from
a holder in another process (MC_TE_SHM=0) they go as strided gathered
reads (READV_STRIDED) built from the blocks themselves: two objects' rows
interleaved into whole destination rows, a column block into a contiguous
destination, one into a strided destination, single rows beside them --
every byte exact, nothing outside the blocks touched.  A block past the
object's end (or with a stride shorter than its rows, or a destination
past the registered buffer) is refused alone before anything moves.  A
holder (or reader) with MC_TE_READV_STRIDED=0 gets the same bytes through
the rows.  While the holder removes and puts the keys again, each key's
blocks are read from one version of it or fail whole."""
import uuid

import numpy as np
import pytest

from helpers import MiB, holder_objects, race_reads_with_reputs

ROW = 1024
NROW = 300  # rows per object: several reads of the slice size
INVALID_PARAMS = -600


def _key(tag):
    return f"blocks-{tag}-{uuid.uuid4().hex[:8]}"


def _blocks():
    """The blocks of one read over objects a, b, c, d (each NROW * 2 * ROW
    bytes): (key index, dst, dst stride, src, src stride, row length,
    rows) each, and the destination's size.  a and b interleaved into
    rows of 2 * ROW (a group of two); c's first halves back to back (a
    contiguous destination); d's second halves into every third half-row
    slot (a strided destination); single rows of a, and an empty block."""
    out, at = [], 0
    out.append((0, at, 2 * ROW, 0, ROW, ROW, NROW))            # a | b
    out.append((1, at + ROW, 2 * ROW, 0, ROW, ROW, NROW))
    at += NROW * 2 * ROW + 64
    out.append((2, at, ROW // 2, 0, 2 * ROW, ROW // 2, NROW))  # c: contiguous destination
    at += NROW * (ROW // 2) + 64
    out.append((3, at, 3 * (ROW // 2), ROW + ROW // 2, 2 * ROW, ROW // 2, NROW))
    at += NROW * 3 * (ROW // 2) + 64
    for i in range(9):                                         # irregular single rows
        n = 1 + (i * 53) % 900
        out.append((0, at, 0, (i * i * 37) % (NROW * ROW - 900), 0, n, 1))
        at += n + 3
    out.append((1, at, ROW, 0, ROW, 0, 5))                     # empty
    return out, at + 64


def _cols(blocks, buf):
    c = [np.array([b[j] for b in blocks], np.int64) for j in range(7)]
    kidx, dst, dstr, src, sstr, rl, rows = c
    return kidx, np.full(len(blocks), buf.ctypes.data, np.int64), dst, dstr, src, sstr, rl, rows


def _rows(arr, at, stride, n, rows):
    """The rows of a block in ``arr`` (uint8) as a (rows, n) view."""
    return np.lib.stride_tricks.as_strided(arr[at:], shape=(rows, n), strides=(stride, 1))


def _want(blocks, values, size, fill=0xAA):
    want = np.full(size, fill, np.uint8)
    for k, d, ds, s, ss, n, r in blocks:
        for i in range(r):
            want[d + i * ds:d + i * ds + n] = np.frombuffer(
                values[k][s + i * ss:s + i * ss + n], np.uint8)
    return want


def _read(store, keys, blocks, buf):
    kidx, bufs, dst, dstr, src, sstr, rl, rows = _cols(blocks, buf)
    return np.frombuffer(store._store.read_blocks(keys, kidx, bufs, dst, dstr, src, sstr, rl,
                                                  rows), np.int64)


def _holder_run(master, make_store, monkeypatch, holder_env, reader_env, body):
    with holder_objects(master, make_store, monkeypatch, "holder-blocks", "blocks", holder_env,
                        reader_env, NROW * 2 * ROW) as (reader, keys, values):
        body(reader, keys, values)


def _exact(regbuf):
    def body(reader, keys, values):
        blocks, size = _blocks()
        buf = regbuf(reader, size, fill=0xAA)
        want = _want(blocks, values, size)
        for _ in range(3):
            buf[:] = 0xAA
            res = _read(reader, keys, blocks, buf)
            assert res.tolist() == [b[5] * b[6] for b in blocks]
            bad = np.flatnonzero(buf != want)
            assert len(bad) == 0, f"{len(bad)} bytes wrong, first at {bad[0]}"
    return body


def test_blocks_exact_from_another_process(master, make_store, regbuf, monkeypatch):
    _holder_run(master, make_store, monkeypatch, {}, {}, _exact(regbuf))


@pytest.mark.parametrize("side", ["holder", "reader"])
def test_blocks_without_strided_reads_same_bytes(master, make_store, regbuf, monkeypatch, side):
    """MC_TE_READV_STRIDED=0 at the holder (its descriptor lacks
    "tcp_readv_strided": the blocks go as rows) or at the reader: the same
    bytes."""
    off = {"MC_TE_READV_STRIDED": "0"}
    _holder_run(master, make_store, monkeypatch, off if side == "holder" else {},
                off if side == "reader" else {}, _exact(regbuf))


def test_bad_blocks_are_refused_alone(master, make_store, regbuf, monkeypatch):
    """A block whose last row passes the object's end, one whose first row
    does, a stride shorter than a row, a destination past the registered
    buffer: each INVALID_PARAMS, nothing of it written; the good blocks of
    the same call read exactly."""
    def body(reader, keys, values):
        size_obj = NROW * 2 * ROW
        good = [(0, 0, 2 * ROW, 0, ROW, ROW, NROW), (1, ROW, 2 * ROW, 0, ROW, ROW, NROW)]
        at = NROW * 2 * ROW + 64
        bad = [
            (2, at, ROW, 0, 2 * ROW, ROW, NROW + 1),            # last row past the end
            (2, at, ROW, size_obj - ROW + 1, 0, ROW, 1),        # the one row past the end
            (2, at, ROW, size_obj, 0, 1, 1),                    # first row at the end
            (3, at, ROW, 0, ROW - 1, ROW, 4),                   # source stride < row
            (3, at, ROW - 1, 0, ROW, ROW, 4),                   # destination stride < row
            (3, at, ROW, 0, ROW, ROW, 2 ** 62),                 # span overflows
            (3, at, 2 ** 20, 0, ROW, ROW, 64),                  # destination past the buffer
        ]
        size = at + 4 * ROW
        buf = regbuf(reader, size, fill=0xAA)
        res = _read(reader, keys, good + bad, buf)
        assert res.tolist() == [ROW * NROW] * 2 + [INVALID_PARAMS] * len(bad)
        want = _want(good, values, size)
        assert (buf == want).all()
    _holder_run(master, make_store, monkeypatch, {}, {}, body)


def test_blocks_while_keys_are_put_again(make_store, regbuf, monkeypatch):
    """While the holder removes (forced) and puts again every key with new
    bytes as fast as it can, each key of each read_blocks call has every
    block read from one version of it, byte for byte, or fails as a whole;
    nothing lands outside the blocks' destinations."""
    monkeypatch.setenv("MC_TE_SHM", "0")
    holder = make_store(segment=48 * MiB)  # this process, its own engine: reached by TCP
    reader = make_store(segment=0)
    size, row = 128 * 1024, 1024
    nrow = size // row
    keys = [_key(f"r{i}") for i in range(8)]
    # pairs of keys interleaved into rows of 2 * row; each key also read
    # whole-row by a second block of its first half rows, contiguous
    blocks, at = [], 0
    for p in range(0, len(keys), 2):
        blocks.append((p, at, 2 * row, 0, row, row, nrow))
        blocks.append((p + 1, at + row, 2 * row, 0, row, row, nrow))
        at += nrow * 2 * row + 64
    for j in range(len(keys)):
        blocks.append((j, at, row // 2, 0, row, row // 2, nrow))
        at += nrow * (row // 2) + 64
    buf = regbuf(reader, at, fill=0xAA)
    covered = np.zeros(at, bool)
    for _, d, ds, _, _, n, r in blocks:
        _rows(covered, d, ds, n, r)[:] = True
    mine = [[b for b in blocks if b[0] == j] for j in range(len(keys))]
    at_of = [[i for i, b in enumerate(blocks) if b[0] == j] for j in range(len(keys))]

    def read_once():
        buf[:] = 0xAA
        res = _read(reader, keys, blocks, buf)
        return res, ("bytes outside the blocks' destinations"
                     if (buf[~covered] != 0xAA).any() else None)

    def judge(j, res, known):
        r = res[at_of[j]]
        if (r < 0).all():
            return "failed"
        if not (r == [b[5] * b[6] for b in mine[j]]).all():
            return f"some blocks read, others not: {sorted(set(r.tolist()))}"
        got = [_rows(buf, b[1], b[2], b[5], b[6]) for b in mine[j]]
        if not any(all((g == _rows(np.frombuffer(v, np.uint8), b[3], b[4], b[5], b[6])).all()
                       for g, b in zip(got, mine[j]))
                   for v in reversed(known)):
            return "bytes of no single version of it"
        return None

    race_reads_with_reputs(holder, keys, lambda k: size, read_once, judge)


def test_lowered_reads_become_blocks_of_exactly_their_rows():
    """A load's lowered reads (regions' rows one after another, runs of
    other strides, single reads between) as strided blocks: the blocks'
    rows are the reads, each exactly once; the regular regions are one
    block each."""
    from types import SimpleNamespace

    from mooncake.reshard.weight.store import _lowered_blocks

    rng = np.random.default_rng(7)
    key, src, ln, tgt, dst = [], [], [], [], []
    regions = []
    for r in range(60):
        k, t = int(rng.integers(0, 5)), int(rng.integers(0, 3))
        n = int(rng.integers(1, 40))
        length = int(rng.integers(1, 300))
        ss, dd = length + int(rng.integers(0, 3)) * 64, length + int(rng.integers(0, 3)) * 32
        s0, d0 = int(rng.integers(0, 1 << 20)), int(rng.integers(0, 1 << 20))
        if r % 7 == 3:  # irregular: the lengths differ
            for i in range(n):
                key.append(k), tgt.append(t), src.append(s0 + i * 999)
                dst.append(d0 + i * 999), ln.append(1 + (i * 37) % 500)
            continue
        regions.append(n)
        for i in range(n):
            key.append(k), tgt.append(t), src.append(s0 + i * ss), dst.append(d0 + i * dd)
            ln.append(length)
    lw = SimpleNamespace(key=np.array(key), src=np.array(src), length=np.array(ln),
                         target=np.array(tgt), dst=np.array(dst))
    ptr = np.array([1 << 40, 2 << 40, 3 << 40], np.int64)
    kidx, bufs, d, dstr, s, sstr, rl, rows = _lowered_blocks(lw, ptr)
    got = []
    for b in range(len(kidx)):
        assert rows[b] == 1 or (dstr[b] >= rl[b] and sstr[b] >= rl[b])
        for i in range(int(rows[b])):
            got.append((int(kidx[b]), int(bufs[b]), int(d[b] + i * dstr[b]),
                        int(s[b] + i * sstr[b]), int(rl[b])))
    want = [(k, int(ptr[t]), dd, ss, n) for k, t, dd, ss, n in zip(key, tgt, dst, src, ln)]
    assert sorted(got) == sorted(want)
    # far fewer blocks than reads: the regions' rows went as blocks
    assert len(kidx) < len(key) // 3, (len(kidx), len(key))
