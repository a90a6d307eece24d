#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Master and metadata server load: is_exist QPS from one store client.

Upstream's ``test_meta_server`` (a benchmark, not a test suite: pytest
collects nothing here).  Start a master and a metadata server first, e.g.

    mooncake_master --enable_http_metadata_server=true \\
        --http_metadata_server_host=0.0.0.0 --http_metadata_server_port=8080
    # or: python3 -m mooncake.http_metadata_server --port 8080

then run ``scripts/test_meta_server.py [master_host] [num_threads]``
(defaults: master.mooncake.dc, 1).  The client sets up with no global
segment and a 512 MiB local buffer, every thread asks is_exist of 15000
random keys, and the run prints ``total time: T s, QPS: Q``.  Exit status 0,
or 1 when setup fails.

Environment: ``MC_RPC_PROTOCOL`` (tcp), ``DEVICE_NAME`` (RDMA devices, ""),
``LOCAL_HOSTNAME`` (127.0.0.1), ``METADATA_ADDR``
(http://<master_host>:8080/metadata), ``MASTER_SERVER`` (<master_host>:50051).
"""

import os
import random
import sys
import threading
import time

#: is_exist calls per thread, as upstream.
REQUESTS_PER_THREAD = 15000
#: The client's local buffer (it contributes no segment).
LOCAL_BUFFER_SIZE = 512 * 1024 * 1024


def _ask(store, n: int) -> None:
    rng = random.Random()
    for _ in range(n):
        store.is_exist(str(rng.randint(0, 1000000)))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    master_host = argv[0] if len(argv) > 0 else "master.mooncake.dc"
    num_threads = int(argv[1]) if len(argv) > 1 else 1
    from mooncake.store import MooncakeDistributedStore  # here: pytest may collect this file

    env = os.environ.get
    store = MooncakeDistributedStore()
    rc = store.setup(env("LOCAL_HOSTNAME", "127.0.0.1"),
                     env("METADATA_ADDR", f"http://{master_host}:8080/metadata"),
                     0, LOCAL_BUFFER_SIZE,
                     env("MC_RPC_PROTOCOL", "tcp"),
                     env("DEVICE_NAME", ""),
                     env("MASTER_SERVER", f"{master_host}:50051"))
    if rc != 0:
        print(f"setup failed: {rc}", file=sys.stderr)
        return 1
    try:
        threads = [threading.Thread(target=_ask, args=(store, REQUESTS_PER_THREAD))
                   for _ in range(num_threads)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        total = time.perf_counter() - start
    finally:
        store.close()
    qps = REQUESTS_PER_THREAD * num_threads / total if total > 0 else 0
    print(f"total time: {total} s, QPS: {qps:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
