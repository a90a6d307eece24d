# SPDX-License-Identifier: Apache-2.0
"""Only the client that mounted a segment may replace or delete its
descriptors in the master's HTTP metadata store (docs/protocol.md §6.1).

A writer without the owner's token (sent by the owner's transfer engine as
X-Mooncake-Owner-Token, from the master's HELLO answer) gets 403 for PUT
and DELETE of mooncake/ram/<segment> and mooncake/rpc_meta/<segment>,
and readers keep getting the owner's bytes; the owner's own later writes
(a segment mounted after setup republishes the descriptor) succeed.
Keys of segments nobody has mounted, and other keys, stay open to
everyone (upstream engines send no token).  Once the owner is gone --
expired after a kill -9 -- anyone may write again.
"""

import http.client
import os

from helpers import wait_until


def req(port, method, key, body=None, token=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        headers = {"X-Mooncake-Owner-Token": token} if token else {}
        c.request(method, f"/metadata?key={key}", body=body, headers=headers)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def test_only_the_mounting_client_writes_its_descriptors(master, spawn_client):
    port = master.http_port
    owner = spawn_client("owner")
    name = owner.setup(master, metadata="http")
    ram, rpc = f"mooncake/ram/{name}", f"mooncake/rpc_meta/{name}"
    st, good = req(port, "GET", ram)
    assert st == 200 and b"buffers" in good, (st, good)

    for key in (ram, rpc):
        for token in (None, "0" * 32, "not-hex"):
            assert req(port, "PUT", key, b'{"evil":1}', token)[0] == 403, (key, token)
            assert req(port, "DELETE", key, token=token)[0] == 403, (key, token)
    assert req(port, "GET", ram) == (200, good)

    # the owner's engine republishes with its token (a second segment)
    assert owner.call("allocate_and_mount", size=4 << 20)["ret"] == 0
    st, after = req(port, "GET", ram)
    assert st == 200 and after != good                # one more buffer listed

    # a reader through the same store gets the owner's bytes
    reader = spawn_client("reader")
    reader.setup(master, metadata="http", segment=0)
    v = os.urandom(256).hex()
    assert reader.call("put", key="owned-seg", hex=v)["rc"] == 0
    assert reader.call("get", key="owned-seg")["hex"] == v

    # keys of no mounted segment, and other keys, are open to anyone
    assert req(port, "PUT", "mooncake/ram/nobody:1", b"{}")[0] == 200
    assert req(port, "PUT", "some/other/key", b"x")[0] == 200

    # once the owner is expired, anyone may write its keys again
    owner.kill()
    wait_until(lambda: req(port, "PUT", ram, b'{"next":1}')[0] == 200, 15,
               "the master to expire the killed owner and free its descriptors")
