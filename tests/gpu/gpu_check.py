# SPDX-License-Identifier: Apache-2.0
"""Checks that need a real GPU (run by tests/gpu/run.sh): pinned store
segments, device-pointer register_buffer / put_from / get_into round trips
with torch CUDA tensors, and the refusals of batch and tensor reads into
device memory.  Prints one line per check and exits non-zero on the first
failure."""
import ctypes
import os
import sys

import torch

from mooncake.store import MooncakeDistributedStore

MiB = 1 << 20


def check(name, ok, extra=""):
    print(f"{'PASS' if ok else 'FAIL'} {name} {extra}".rstrip(), flush=True)
    if not ok:
        sys.exit(1)


def main():
    master = os.environ["T_MASTER"]
    assert torch.cuda.is_available(), "torch sees no GPU"
    cudart = ctypes.CDLL(os.environ.get("MC_CUDART_PATH") or "libcudart.so")
    s = MooncakeDistributedStore()
    check("setup", s.setup("localhost", "P2PHANDSHAKE", 64 * MiB, 16 * MiB, "tcp", "",
                           master) == 0)

    # pinned: a store object's memory reports cudaMemoryTypeHost (1)
    s.put("gpu-pin", b"p" * 4096)
    desc = s.get_replica_desc("gpu-pin")[0].get_memory_descriptor().buffer_descriptor
    attr = (ctypes.c_int * 32)()
    rc = cudart.cudaPointerGetAttributes(attr, ctypes.c_void_p(desc.buffer_address_))
    check("setup segment pinned", rc == 0 and attr[0] == 1, f"(rc {rc}, type {attr[0]})")

    n = 8 * MiB + 123
    src = torch.randint(0, 255, (n,), dtype=torch.uint8, device="cuda")
    dst = torch.zeros(16 * MiB, dtype=torch.uint8, device="cuda")
    check("register_buffer(device)", s.register_buffer(src.data_ptr(), n) == 0)
    check("register_buffer(device) 2", s.register_buffer(dst.data_ptr(), 16 * MiB) == 0)
    check("put_from(device)", s.put_from("gpu-k1", src.data_ptr(), n) == 0)
    got = s.get("gpu-k1")
    check("get == device bytes", got == bytes(src.cpu().numpy()))
    r = s.get_into("gpu-k1", dst.data_ptr(), 16 * MiB)
    check("get_into(device) size", r == n, f"({r})")
    torch.cuda.synchronize()
    check("get_into(device) bytes", torch.equal(dst[:n], src))
    check("get_into(device) too small", s.get_into("gpu-k1", dst.data_ptr(), 1000) < 0)
    check("batch_get_into(device) refused",
          s.batch_get_into(["gpu-k1"], [dst.data_ptr()], [16 * MiB])[0] < 0)

    # get_tensor_into on a CUDA buffer: filled in place, the tensor stays on the GPU
    t = torch.randn(256, 1024, device="cuda")
    check("put_tensor(cuda)", s.put_tensor("gpu-t", t) == 0)
    out = s.get_tensor_into("gpu-t", dst.data_ptr(), 16 * MiB)
    torch.cuda.synchronize()
    check("get_tensor_into(cuda) on the device", out is not None and out.is_cuda,
          f"({None if out is None else out.device})")
    check("get_tensor_into(cuda) views the buffer",
          dst.data_ptr() < out.data_ptr() < dst.data_ptr() + 16 * MiB)
    check("get_tensor_into(cuda) values", torch.equal(out, t))
    check("unregister", s.unregister_buffer(src.data_ptr()) == 0 and
          s.unregister_buffer(dst.data_ptr()) == 0)
    check("close", s.close() == 0)
    print("ALL PASS")


if __name__ == "__main__":
    main()
