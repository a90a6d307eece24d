# SPDX-License-Identifier: Apache-2.0
"""A TransferEngine in its own process, driven by test_engine.py over a pipe.

One JSON object per line on stdin, one JSON answer per line on stdout:

  te       method, args=[...]  -> result (bytes come back as hex; a
                                  NotImplementedError/exception answers error)
  fill     addr, hex           -> rc      (write_bytes_to_buffer)
  np_alloc size                -> addr    (a numpy array kept alive here)
  exit                         (no answer)
"""

import json
import sys
import traceback

import numpy

from mooncake.engine import TransferEngine


def main():
    te = TransferEngine()
    arrays = []
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            op = req["op"]
            if op == "exit":
                break
            if op == "te":
                r = getattr(te, req["method"])(*req.get("args", []))
                resp = {"result": r.hex() if isinstance(r, bytes) else r}
            elif op == "fill":
                data = bytes.fromhex(req["hex"])
                resp = {"rc": te.write_bytes_to_buffer(req["addr"], data, len(data))}
            elif op == "np_alloc":
                a = numpy.zeros(req["size"], dtype=numpy.uint8)
                arrays.append(a)
                resp = {"addr": a.ctypes.data}
            else:
                raise ValueError(f"unknown op {op!r}")
        except Exception as e:  # report, keep serving
            traceback.print_exc(file=sys.stderr)
            resp = {"error": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(resp).encode() + b"\n")
        out.flush()


if __name__ == "__main__":
    main()
