"""Tensors in Mooncake Store: whole, split for tensor parallelism, and zero copy.

Needs a running mooncake_master (the address in setup below) and PyTorch.
"""
import numpy as np
import torch

from mooncake.store import MooncakeDistributedStore

store = MooncakeDistributedStore()
rc = store.setup("localhost", "P2PHANDSHAKE", 512 * 1024 * 1024, 128 * 1024 * 1024,
                 "tcp", "", "localhost:50051")
if rc != 0:
    raise SystemExit(f"setup failed: {rc}")

# A whole tensor: the 304-byte header and the data, one object.
weights = torch.randn(128, 64, dtype=torch.bfloat16)
assert store.put_tensor("weights", weights) == 0
print("get_tensor:", torch.equal(store.get_tensor("weights"), weights))

# Tensor parallelism: 4 shards along dim 1, stored as weights_tp_0 .. weights_tp_3.
assert store.put_tensor_with_tp("weights", weights, tp_size=4, split_dim=1) == 0
shard = store.get_tensor_with_tp("weights", tp_rank=2, tp_size=4)
print("shard 2 of 4:", tuple(shard.shape), torch.equal(shard, weights[:, 32:48]))

# Zero copy: read into a registered buffer, change it there, write it back.
buf = np.zeros(1 << 20, dtype=np.uint8)
store.register_buffer(buf.ctypes.data, buf.nbytes)
view = store.get_tensor_into("weights", buf.ctypes.data, buf.nbytes)
view.mul_(2)                                   # in the buffer, no copy
size = 304 + view.numel() * view.element_size()  # header + data
assert store.upsert_tensor_from("weights", buf.ctypes.data, size) == 0
print("read-modify-write:", torch.equal(store.get_tensor("weights"), weights * 2))
store.unregister_buffer(buf.ctypes.data)
store.close()
