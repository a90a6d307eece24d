# SPDX-License-Identifier: Apache-2.0
"""A store client in its own process, driven by the tests over a pipe.

Protocol: one JSON object per line on stdin, one JSON answer per line on
stdout, in order.  Every request has "op"; a failure inside an op answers
{"error": "..."} and the process keeps serving.  Values travel as hex
(small ones) or are generated here and described by their SHA-256, so
64 MiB objects never cross the pipe.

  setup        args=[...7 positional...] | config={...}   -> rc, hostname
  put          key, hex, preferred?, replica_num?          -> rc
  put_random   key, size, preferred?, replica_num?, hard_pin? -> rc, sha256
  upsert       key, hex, preferred?, replica_num?          -> rc
  upsert_random key, size, preferred?, replica_num?        -> rc, sha256
  replica_desc key                 -> replicas: [{status, memory, nof, endpoint, size}]
  get          key                                -> len, sha256, seconds, hex (<= 4 KiB),
                                                     detail (why, when b"")
  exist        key                                         -> rc
  get_size     key                                         -> rc
  remove       key, force?                                 -> rc
  put_batch    keys, hexes                                 -> rc
  get_batch    keys                                        -> hexes
  batch_exist  keys                                        -> rcs
  tensor_put   method (put_tensor, upsert_tensor, put_tensor_with_tp, ...),
               key, dtype, shape, hex (the tensor's bytes), kwargs?      -> rc
  tensor_get   method (get_tensor, get_tensor_with_tp, ...), key, kwargs?
                                          -> none, or dtype, shape, hex
  invoke       method, args? ({"hex": h} for bytes), kwargs?, config? ({field: value}
               of a ReplicateConfig passed last)           -> ret (JSON form of the result)
  put_checked  key, version, size, preferred?, upsert?      -> rc  (helpers.checked_value)
  hammer_start keys, mode (get | get_into | batch_get_into | get_batch), cap
               reads the keys round and round on a thread, checking every value
  hammer_peek / hammer_stop        -> reads, ok, miss, bad, versions (per key: highest seen)
  hammer_run   keys, mode, cap, rounds: the same, on this thread, for that many rounds
  hostname                                                 -> hostname
  nof          method, args?   (a MooncakeDistributedNoFRegister's) -> ret, detail
  close                                                    -> rc
  exit                                                     (no answer)
"""

import hashlib
import json
import os
import sys
import time
import traceback

from mooncake.store import MooncakeDistributedStore, ReplicateConfig, last_error_detail


def config_for(req):
    seg = req.get("preferred")
    replicas = req.get("replica_num")
    hard_pin = req.get("hard_pin", False)
    dfs = req.get("dfs_replica_num")
    if not seg and replicas is None and not hard_pin and dfs is None:
        return None
    cfg = ReplicateConfig()
    cfg.with_hard_pin = hard_pin
    if dfs is not None:
        cfg.dfs_replica_num = dfs
    if seg:
        cfg.preferred_segment = seg
    if replicas is not None:
        cfg.replica_num = replicas
    return cfg


def jsonable(v):
    """The JSON form of a store call's result: enums and UUIDs as their
    value and text, objects as a dict of their public attributes."""
    import enum
    import uuid
    if v is None or isinstance(v, (bool, int, float, str)):
        return int(v) if isinstance(v, enum.Enum) else v
    if isinstance(v, enum.Enum):
        return v.value
    if isinstance(v, uuid.UUID):
        return str(v)
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    return {k: jsonable(getattr(v, k)) for k in dir(v)
            if not k.startswith("_") and not callable(getattr(v, k))}


_nof = None  # MooncakeDistributedNoFRegister of the "nof" op


def handle(store, req):
    op = req["op"]
    if op == "invoke":
        def arg(a):  # {"hex": ...}: bytes
            if isinstance(a, dict) and list(a) == ["hex"]:
                return bytes.fromhex(a["hex"])
            return [arg(x) for x in a] if isinstance(a, list) else a
        args = [arg(a) for a in req.get("args", [])]
        if "config" in req:
            cfg = ReplicateConfig()
            for k, v in req["config"].items():
                setattr(cfg, k, v)
            args.append(cfg)
        return {"ret": jsonable(getattr(store, req["method"])(*args, **req.get("kwargs", {}))),
                "detail": last_error_detail()}
    if op == "setup":
        if "config" in req:
            rc = store.setup(req["config"])
        else:
            rc = store.setup(*req["args"], **req.get("kwargs", {}))
        return {"rc": rc, "hostname": store.get_hostname()}
    if op == "put":
        return {"rc": store.put(req["key"], bytes.fromhex(req["hex"]), config_for(req))}
    if op == "put_random":
        data = os.urandom(req["size"])
        rc = store.put(req["key"], data, config_for(req))
        return {"rc": rc, "sha256": hashlib.sha256(data).hexdigest()}
    if op == "upsert":
        return {"rc": store.upsert(req["key"], bytes.fromhex(req["hex"]), config_for(req))}
    if op == "upsert_random":
        data = os.urandom(req["size"])
        rc = store.upsert(req["key"], data, config_for(req))
        return {"rc": rc, "sha256": hashlib.sha256(data).hexdigest()}
    if op == "replica_desc":
        out = []
        for d in store.get_replica_desc(req["key"]):
            r = {"status": int(d.status), "memory": bool(d.is_memory_replica()),
                 "nof": bool(d.is_nof_replica()),
                 "local_disk": bool(d.is_local_disk_replica())}
            if r["memory"] or r["nof"]:
                bd = (d.get_memory_descriptor() if r["memory"]
                      else d.get_nof_descriptor()).buffer_descriptor
                r["endpoint"] = bd.transport_endpoint
                r["size"] = bd.size
                r["addr"] = bd.buffer_address
            elif r["local_disk"]:  # a record of an SSD-offload tier
                ld = d.get_local_disk_descriptor()
                r.update(file_path=ld.file_path, size=ld.object_size, offset=ld.offset,
                         dfs=False, holder=ld.transport_endpoint)
            elif d.is_disk_replica():  # a record of the DFS tier
                dd = d.get_disk_descriptor()
                r.update(file_path=dd.file_path, size=dd.object_size, offset=dd.offset,
                         dfs=dd.is_dfs, shard_idx=dd.shard_idx, aligned_size=dd.aligned_size)
            out.append(r)
        return {"replicas": out}
    if op == "get":
        t0 = time.monotonic()
        data = store.get(req["key"])
        out = {"len": len(data), "sha256": hashlib.sha256(data).hexdigest(),
               "seconds": round(time.monotonic() - t0, 3)}
        if len(data) <= 4096:
            out["hex"] = data.hex()
        if not data:
            out["detail"] = last_error_detail()
        return out
    if op == "exist":
        return {"rc": store.is_exist(req["key"])}
    if op == "get_size":
        return {"rc": store.get_size(req["key"])}
    if op == "remove":
        return {"rc": store.remove(req["key"], req.get("force", False))}
    if op == "put_batch":
        return {"rc": store.put_batch(req["keys"], [bytes.fromhex(h) for h in req["hexes"]])}
    if op == "get_batch":
        return {"hexes": [v.hex() for v in store.get_batch(req["keys"])]}
    if op == "get_into_batch":
        # batch_get_into of existing keys into pool blocks: each answer and
        # the digest of what landed
        import ctypes
        keys, sizes = req["keys"], req["sizes"]
        blocks = [store.alloc_from_mem_pool(n) for n in sizes]
        ns = store.batch_get_into(keys, blocks, sizes)
        digests = [hashlib.sha256(ctypes.string_at(b, n)).hexdigest()
                   for b, n in zip(blocks, sizes)]
        for b in blocks:
            store._mem_pool_free(b)
        return {"ns": ns, "sha256s": digests}
    if op == "batch_exist":
        return {"rcs": store.batch_is_exist(req["keys"])}
    if op == "tensor_put":
        import torch
        dt = getattr(torch, req["dtype"])
        raw = bytearray.fromhex(req["hex"])
        t = torch.frombuffer(raw, dtype=torch.uint8).view(dt).view(req["shape"]) \
            if raw else torch.empty(req["shape"], dtype=dt)
        return {"rc": getattr(store, req["method"])(req["key"], t, **req.get("kwargs", {}))}
    if op == "tensor_get":
        t = getattr(store, req["method"])(req["key"], **req.get("kwargs", {}))
        if t is None:
            return {"none": True}
        return {"none": False, "dtype": str(t.dtype).replace("torch.", ""),
                "shape": list(t.shape), "hex": t.contiguous().view(-1).view(
                    __import__("torch").uint8).numpy().tobytes().hex() if t.numel() else ""}
    if op == "batch_replica_clear":
        return {"keys": store.batch_replica_clear(req["keys"], req.get("segment_name", ""))}
    if op == "setup_dummy":
        return {"rc": store.setup_dummy(req["pool"], req["lbuf"], req["addr"]),
                "detail": last_error_detail()}
    if op == "dummy_stats":
        return store._dummy_server_stats()
    if op == "zc_roundtrip":
        # put_from a pool block of `size` random bytes, get_into another
        import ctypes
        size = req["size"]
        src, dst = store.alloc_from_mem_pool(size), store.alloc_from_mem_pool(size)
        data = os.urandom(size)
        ctypes.memmove(src, data, size)
        rc = store.put_from(req["key"], src, size)
        n = store.get_into(req["key"], dst, size)
        ok = ctypes.string_at(dst, size) == data
        store._mem_pool_free(src)
        store._mem_pool_free(dst)
        return {"rc": rc, "n": n, "ok": ok, "sha256": hashlib.sha256(data).hexdigest()}
    if op == "blocks_roundtrip":
        # put a value of `size` random bytes, read strided blocks of it
        # (read_blocks: row i of block (dst, dst stride, src, src stride,
        # row length, rows) at src + i * src stride to dst + i * dst
        # stride) into a pool block of `size` bytes prefilled with 0xAA:
        # the results and whether every byte is what the rows say
        import ctypes
        import struct
        size, blocks = req["size"], req["blocks"]
        data = os.urandom(size)
        rc = store.put(req["key"], data)
        dst = store.alloc_from_mem_pool(size)
        ctypes.memset(dst, 0xAA, size)
        cols = list(zip(*blocks))
        res = store._store.read_blocks([req["key"]], [0] * len(blocks), [dst] * len(blocks),
                                       *[list(c) for c in cols])
        res = list(struct.unpack(f"{len(blocks)}q", res))
        want = bytearray(b"\xaa" * size)
        for (d, ds, s, ss, n, r), got in zip(blocks, res):
            if got >= 0:
                for i in range(r):
                    want[d + i * ds:d + i * ds + n] = data[s + i * ss:s + i * ss + n]
        ok = ctypes.string_at(dst, size) == bytes(want)
        store._mem_pool_free(dst)
        return {"rc": rc, "res": res, "ok": ok}
    if op == "batch_zc":
        import ctypes
        keys, size = req["keys"], req["size"]
        blocks = [store.alloc_from_mem_pool(size) for _ in keys]
        datas = [os.urandom(size) for _ in keys]
        for b, d in zip(blocks, datas):
            ctypes.memmove(b, d, size)
        rcs = store.batch_put_from(keys, blocks, [size] * len(keys))
        for b in blocks:
            ctypes.memset(b, 0, size)
        ns = store.batch_get_into(keys, blocks, [size] * len(keys))
        ok = all(ctypes.string_at(b, size) == d for b, d in zip(blocks, datas))
        for b in blocks:
            store._mem_pool_free(b)
        return {"rcs": rcs, "ns": ns, "ok": ok}
    if op == "sessions":
        # the ranged sessions on one key, from buffers of the shared pool (a
        # dummy) or registered memory (an ordinary client): what each call
        # answers, and whether the bytes came back
        import ctypes
        key, size = req["key"], req["size"]
        half = size // 2
        if getattr(store, "_dummy", False):
            src, dst = store.alloc_from_mem_pool(size), store.alloc_from_mem_pool(size)
        else:
            mem = (ctypes.c_ubyte * (2 * size))()
            src = ctypes.addressof(mem)
            dst = src + size
            assert store.register_buffer(src, 2 * size) == 0
        data = os.urandom(size)
        ctypes.memmove(src, data, size)
        out = {"put_start": store.batch_put_session_start([key], [size])}
        out["put_write"] = store.batch_put_from_multi_buffer_ranges(
            [key], [[src, src + half]], [[half, size - half]], [[0, half]])
        out["write_unopened"] = store.batch_put_from_multi_buffer_ranges(
            [key + "-none"], [[src]], [[16]], [[0]])
        out["put_end"] = store.batch_put_session_end([key])
        out["got"] = store.get(key) == data
        out["get_start"] = store.batch_get_session_start([key, key + "-missing"])
        out["get_read"] = store.batch_get_into_multi_buffer_ranges(
            [key], [[dst, dst + (size - half)]], [[size - half, half]], [[half, 0]])
        out["read_ok"] = ctypes.string_at(dst, size) == data[half:] + data[:half]
        out["get_end"] = store.batch_get_session_end([key])
        out["read_ended"] = store.batch_get_into_multi_buffer_ranges(
            [key], [[dst]], [[16]], [[0]])
        out["revoke_start"] = store.batch_put_session_start([key + "-r"], [size])
        out["revoke"] = store.batch_put_session_revoke([key + "-r"])
        out["revoked_exists"] = store.is_exist(key + "-r")
        if getattr(store, "_dummy", False):
            store._mem_pool_free(src)
            store._mem_pool_free(dst)
        else:
            store.unregister_buffer(src)
        return out
    if op == "session_buf":
        # a buffer of the shared pool holding `size` bytes of `hex` repeated
        import ctypes
        p = store.alloc_from_mem_pool(req["size"])
        pat = bytes.fromhex(req["hex"])
        ctypes.memmove(p, (pat * (req["size"] // len(pat) + 1))[:req["size"]], req["size"])
        return {"addr": p}
    if op == "register_outside":
        buf = bytearray(4096)
        import ctypes
        addr = ctypes.addressof((ctypes.c_char * 4096).from_buffer(buf))
        inside = store.alloc_from_mem_pool(4096)
        return {"outside": store.register_buffer(addr, 4096),
                "inside": store.register_buffer(inside, 4096)}
    if op == "put_checked":
        from helpers import checked_value
        v = checked_value(req["key"], req["version"], req["size"])
        fn = store.upsert if req.get("upsert") else store.put
        return {"rc": fn(req["key"], v, config_for(req))}
    if op == "hammer_start":
        HAMMER["st"] = start_hammer(store, req["keys"], req.get("mode", "get"),
                                    req.get("cap", 1 << 20))
        return {"rc": 0}
    if op == "hammer_run":
        st = start_hammer(store, req["keys"], req.get("mode", "get"), req.get("cap", 1 << 20),
                          req["rounds"])
        return {k: st[k] for k in ("reads", "ok", "miss", "bad", "bad_detail", "versions")}
    if op == "hammer_peek":
        st = HAMMER["st"]
        return {k: st[k] for k in ("reads", "ok", "miss", "bad", "bad_detail", "versions")}
    if op == "hammer_stop":
        st = HAMMER.pop("st")
        st["stop"] = True
        st["thread"].join(timeout=60)
        if st["thread"].is_alive():
            raise RuntimeError("the hammer thread did not stop")
        return {k: st[k] for k in ("reads", "ok", "miss", "bad", "bad_detail", "versions")}
    if op == "put_loop":
        # puts until killed (the kill -9 test); answers once started
        import threading
        def loop():
            i = 0
            while True:
                store.put(f"{req['prefix']}-{i}", os.urandom(req["size"]))
                i += 1
        threading.Thread(target=loop, daemon=True).start()
        return {"rc": 0}
    if op == "dataproto_roundtrip":
        # a DataProto put + get (dummy tests: the commit batch is refused
        # there, and the put falls back to payloads-then-manifest)
        import numpy as np
        from mooncake.structured_object_store import MooncakeBundleTransfer
        rows = np.empty(6, dtype=object)
        for i in range(6):
            rows[i] = np.arange(i * 3, dtype=np.int32)
        data = {"batch": {"a": np.arange(6, dtype=np.int64)},
                "non_tensor_batch": {"r": rows}}
        t = MooncakeBundleTransfer(store, key_prefix=req["prefix"])
        commit_rcs = store.batch_put_parts_commit([f"{req['prefix']}/c0", f"{req['prefix']}/c1"],
                                                  [[b"x"], [b"y"]])
        ref = t.put(data)
        got = t.get(ref)
        ok = got["batch"]["a"].tolist() == list(range(6)) and \
            all(np.array_equal(a, b) for a, b in zip(got["non_tensor_batch"]["r"], rows))
        return {"rc": 0, "ok": bool(ok), "commit_rcs": commit_rcs, "commits": t._commits,
                "manifest": ref.stage_refs["default"].manifest_key}

    if op == "tensor_family":
        # every tensor call once, on tensors made here (dummy tests)
        import ctypes
        import torch
        torch.manual_seed(req.get("seed", 1))
        p = req["prefix"]
        a = torch.randn(64, 48)
        b = (torch.arange(5000, dtype=torch.int32) * 7).view(50, 100)
        out = {"put": store.put_tensor(f"{p}a", a),
               "batch_put": store.batch_put_tensor([f"{p}b0", f"{p}b1"], [a * 2, b]),
               "upsert": store.upsert_tensor(f"{p}a", a + 1),
               "pub": store.pub_tensor(f"{p}pub", b),
               "tp_put": store.put_tensor_with_tp(f"{p}tp", a, tp_rank=0, tp_size=4,
                                                  split_dim=1)}
        g = store.get_tensor(f"{p}a")
        out["get_ok"] = g is not None and torch.equal(g, a + 1)
        gs = store.batch_get_tensor([f"{p}b0", f"{p}b1", f"{p}missing"])
        out["batch_get_ok"] = (torch.equal(gs[0], a * 2) and torch.equal(gs[1], b)
                               and gs[2] is None)
        out["pub_ok"] = torch.equal(store.get_tensor(f"{p}pub"), b)
        out["tp_ok"] = all(torch.equal(store.get_tensor_with_tp(f"{p}tp", tp_rank=r, tp_size=4),
                                       a.chunk(4, dim=1)[r]) for r in range(4))
        size = store.get_size(f"{p}a")
        buf = store.alloc_from_mem_pool(size)
        t = store.get_tensor_into(f"{p}a", buf, size)
        out["into_ok"] = t is not None and torch.equal(t, a + 1)
        out["from"] = store.put_tensor_from(f"{p}from", buf, size)
        out["from_ok"] = torch.equal(store.get_tensor(f"{p}from"), a + 1)
        sizes = [store.get_size(f"{p}b0"), store.get_size(f"{p}b1")]
        bufs = [store.alloc_from_mem_pool(n) for n in sizes]
        ts = store.batch_get_tensor_into([f"{p}b0", f"{p}b1"], bufs, sizes)
        out["batch_into_ok"] = torch.equal(ts[0], a * 2) and torch.equal(ts[1], b)
        out["batch_from"] = store.batch_put_tensor_from([f"{p}f0", f"{p}f1"], bufs, sizes)
        out["batch_from_ok"] = torch.equal(store.get_tensor(f"{p}f1"), b)
        for x in [buf] + bufs:
            store._mem_pool_free(x)
        return out
    if op == "get_buffers":
        bufs = store.batch_get_buffer(req["keys"])
        one = store.get_buffer(req["keys"][0])
        return {"sha256": [hashlib.sha256(bytes(b)).hexdigest() if b is not None else None
                           for b in bufs],
                "one": hashlib.sha256(bytes(one)).hexdigest() if one is not None else None}
    if op == "put_from_meta":
        import ctypes
        meta, data = os.urandom(req["meta_size"]), os.urandom(req["size"])
        mp, dp = store.alloc_from_mem_pool(len(meta)), store.alloc_from_mem_pool(len(data))
        ctypes.memmove(mp, meta, len(meta))
        ctypes.memmove(dp, data, len(data))
        rc = store.put_from_with_metadata(req["key"], dp, mp, len(data), len(meta))
        store._mem_pool_free(mp)
        store._mem_pool_free(dp)
        return {"rc": rc, "sha256": hashlib.sha256(meta + data).hexdigest()}
    if op == "ranges":
        # fragments: [[key, dst_off, src_off, size], ...] into one pool buffer
        import ctypes
        cap = req["cap"]
        buf = store.alloc_from_mem_pool(cap)
        ctypes.memset(buf, 0, cap)
        keys = sorted({f[0] for f in req["fragments"]})
        frag = [[f for f in req["fragments"] if f[0] == k] for k in keys]
        res = store.get_into_ranges([buf], [keys], [[[f[1] for f in fs] for fs in frag]],
                                    [[[f[2] for f in fs] for fs in frag]],
                                    [[[f[3] for f in fs] for fs in frag]])
        data = ctypes.string_at(buf, cap)
        store._mem_pool_free(buf)
        return {"results": res[0], "keys": keys, "hex": data.hex()}
    if op == "rounds":
        # announce readiness, wait for the barrier file (bounded), then
        # `rounds` put/get rounds (bytes API and zero copy, alternating),
        # each value read back and compared byte for byte
        import ctypes
        import random
        open(req["ready"], "w").close()
        deadline = time.monotonic() + 30
        while not os.path.exists(req["barrier"]):
            if time.monotonic() > deadline:
                return {"error": "no barrier within 30 s"}
            time.sleep(0.005)
        rng = random.Random(req["prefix"])
        bad, sums, t0 = [], {}, time.monotonic()
        block = store.alloc_from_mem_pool(req["max_size"])
        for r in range(req["rounds"]):
            key = f"{req['prefix']}-{r}"
            data = os.urandom(rng.randint(1, req["max_size"]))
            if r % 2 == 0:
                rc = store.put(key, data)
                back = store.get(key)
            else:
                ctypes.memmove(block, data, len(data))
                rc = store.put_from(key, block, len(data))
                ctypes.memset(block, 0, len(data))
                n = store.get_into(key, block, req["max_size"])
                back = ctypes.string_at(block, n) if n > 0 else b""
            if rc != 0 or back != data:
                bad.append([key, rc, len(data), len(back)])
            sums[key] = hashlib.sha256(data).hexdigest()
        store._mem_pool_free(block)
        return {"bad": bad, "sums": sums, "started": t0, "seconds": time.monotonic() - t0}
    if op == "allocate_and_mount":
        return store.allocate_and_mount_segment(req["size"])
    if op == "hostname":
        return {"hostname": store.get_hostname()}
    if op == "nof":
        # a storage node: a method of this process's NoF register
        global _nof
        if _nof is None:
            from mooncake.store import MooncakeDistributedNoFRegister
            _nof = MooncakeDistributedNoFRegister()
        return {"ret": jsonable(getattr(_nof, req["method"])(*req.get("args", []))),
                "detail": last_error_detail()}
    if op == "close":
        return {"rc": store.close()}
    if op == "hammer":
        # one action on one key, over and over for `seconds`: put/upsert of
        # a fixed value, remove, or get (the distinct values read, by sha)
        key, action, end = req["key"], req["action"], time.monotonic() + req["seconds"]
        data = bytes.fromhex(req.get("hex", ""))
        cfg = config_for(req)
        n, bad, seen = 0, [], {}
        while time.monotonic() < end:
            n += 1
            if action == "put":
                rc = store.put(key, data, cfg)
            elif action == "upsert":
                rc = store.upsert(key, data, cfg)
            elif action == "churn":
                # put, read (a lease), forced remove: the holder frees
                # leased memory at once, so its generation moves on
                k = f"{key}-{n % 8}"
                rc = store.put(k, data, cfg)
                if rc == 0:
                    store.get(k)
                    rc = store.remove(k, True)
                    rc = 0 if rc in (0, -704) else rc
            elif action == "remove":
                # not forced: a read lease keeps the value (a forced remove
                # frees bytes a reader may still be copying)
                rc = store.remove(key, False)
                rc = 0 if rc in (0, -704, -706) else rc
            else:
                got = store.get(key)
                h = hashlib.sha256(got).hexdigest() if got else ""
                seen[h] = seen.get(h, 0) + 1
                rc = 0
            if rc != 0 and len(bad) < 5:
                bad.append(rc)
        return {"n": n, "bad": bad, "seen": seen}
    raise ValueError(f"unknown op {op!r}")


HAMMER = {}


def start_hammer(store, keys, mode, cap, rounds=None):
    """Read ``keys`` over and over on a thread until HAMMER["stop"]; count
    reads that return a complete checked value (ok), a miss, or anything
    else (bad: torn, foreign or garbage bytes)."""
    import threading
    import numpy as np
    from helpers import check_value
    st = {"reads": 0, "ok": 0, "miss": 0, "bad": 0, "bad_detail": [],
          "versions": {k: -1 for k in keys}, "stop": False}
    bufs = []
    if mode in ("get_into", "batch_get_into"):
        for _ in keys:
            arr = np.zeros(cap, dtype=np.uint8)
            assert store.register_buffer(arr.ctypes.data, cap) == 0
            bufs.append(arr)

    def judge(k, data):
        st["reads"] += 1
        if not data:
            st["miss"] += 1
            return
        v = check_value(k, data)
        if v is None:
            st["bad"] += 1
            if len(st["bad_detail"]) < 5:
                st["bad_detail"].append(f"{k}: {len(data)} bytes {data[:32].hex()}")
            return
        st["ok"] += 1
        st["versions"][k] = max(st["versions"][k], v)

    def loop():
        done = 0
        while not st["stop"] and (rounds is None or done < rounds):
            done += 1
            if mode == "get":
                for k in keys:
                    judge(k, store.get(k))
            elif mode == "get_batch":
                for k, d in zip(keys, store.get_batch(keys)):
                    judge(k, d)
            elif mode == "get_into":
                for k, arr in zip(keys, bufs):
                    n = store.get_into(k, arr.ctypes.data, cap)
                    judge(k, arr[:n].tobytes() if n > 0 else b"")
            else:
                ns = store.batch_get_into(keys, [a.ctypes.data for a in bufs], [cap] * len(keys))
                for k, arr, n in zip(keys, bufs, ns):
                    judge(k, arr[:n].tobytes() if n > 0 else b"")
        for arr in bufs:
            store.unregister_buffer(arr.ctypes.data)

    if rounds is not None:
        loop()
        return st
    t = threading.Thread(target=loop, daemon=True)
    st["thread"] = t
    t.start()
    return st


def main():
    store = MooncakeDistributedStore()
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            if req.get("op") == "exit":
                break
            resp = handle(store, req)
        except Exception as e:  # report, keep serving
            traceback.print_exc(file=sys.stderr)
            resp = {"error": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(resp).encode() + b"\n")
        out.flush()
    store.close()


if __name__ == "__main__":
    main()
