# SPDX-License-Identifier: Apache-2.0
"""The memory of a tensor or array about to be written (private).

Owns: :func:`memory_of`, the (address, nbytes, owner) of a contiguous CPU
view of a torch tensor or numpy array.  Shared by ``store`` (the
WeightStore) and ``store_writer`` (the snapshot writer the store opens),
so that the writer does not import the store.  May import: the standard
library; numpy when given something that is not a torch tensor.
"""

from typing import Any, Tuple


def memory_of(tensor: Any, error: type) -> Tuple[int, int, Any]:
    """(address, nbytes, owner) of a contiguous CPU copy-free view, or of a
    contiguous copy when ``tensor`` is not contiguous; ``error`` (the
    WeightStore's error class) is raised for a tensor on another device."""
    if hasattr(tensor, "data_ptr"):  # torch
        if tensor.device.type != "cpu":
            raise error(f"tensor on {tensor.device} (only CPU memory is supported)")
        t = tensor.detach()
        if not t.is_contiguous():
            t = t.contiguous()
        return t.data_ptr(), t.numel() * t.element_size(), t
    # Lazy: numpy is needed only for arrays (a torch-only caller has none).
    import numpy as np
    a = np.ascontiguousarray(tensor)
    return a.ctypes.data, a.nbytes, a
