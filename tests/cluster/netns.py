# SPDX-License-Identifier: Apache-2.0
"""Hosts in network namespaces for the cluster suite.

``Net`` creates a Linux bridge and one namespace per host, each joined to
the bridge by a veth pair and given an address in a private /24 chosen
per run (10.213.X.0/24; the bridge itself is .254, so the test process can
reach every host).  Names carry the test's pid, so parallel runs do not
collide; ``close()`` deletes every namespace and link it made, also after a
failure.  Traffic never leaves the bridge: no route, NAT or forwarding to
any other network is set up.

``cut(host)`` downs the host's end of its veth: the host loses its only
link, and the others see its packets vanish (no RST), as with a pulled
cable; ``heal(host)`` brings it back.
"""

import os
import random
import shutil
import subprocess
from typing import Dict, List


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=20)


def netns_usable() -> str:
    """'' when namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "the cluster suite needs root (ip netns, veth, bridge)"
    if shutil.which("ip") is None:
        return "the cluster suite needs iproute2 (ip)"
    probe = f"mcprobe{os.getpid()}"
    try:
        sh("ip", "netns", "add", probe)
    except (subprocess.CalledProcessError, OSError) as e:
        return f"cannot create a network namespace: {e}"
    sh("ip", "netns", "del", probe)
    return ""


class Net:
    def __init__(self, hosts: List[str]) -> None:
        self.tag = f"mc{os.getpid() % 100000}"
        self.subnet = f"10.213.{random.randrange(1, 250)}"
        self.bridge = f"{self.tag}br"
        self.ns: Dict[str, str] = {}
        self.ip: Dict[str, str] = {}
        self.dev: Dict[str, str] = {}
        self._links: List[str] = []
        try:
            sh("ip", "link", "add", self.bridge, "type", "bridge")
            self._links.append(self.bridge)
            sh("ip", "addr", "add", f"{self.subnet}.254/24", "dev", self.bridge)
            sh("ip", "link", "set", self.bridge, "up")
            for i, h in enumerate(hosts, start=1):
                self._add_host(h, i)
        except BaseException:
            self.close()
            raise

    def _add_host(self, host: str, i: int) -> None:
        ns, outer, inner = f"{self.tag}{host}", f"{self.tag}{host}o", f"{self.tag}{host}i"
        sh("ip", "netns", "add", ns)
        self.ns[host] = ns
        sh("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
        self._links.append(outer)
        sh("ip", "link", "set", inner, "netns", ns)
        sh("ip", "link", "set", outer, "master", self.bridge)
        sh("ip", "link", "set", outer, "up")
        ip = f"{self.subnet}.{i}"
        sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", inner)
        sh("ip", "-n", ns, "link", "set", inner, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        self.ip[host] = ip
        self.dev[host] = inner

    def prefix(self, host: str) -> List[str]:
        """argv prefix that runs a command on ``host`` (ip netns exec execs it)."""
        return ["ip", "netns", "exec", self.ns[host]]

    def cut(self, host: str) -> None:
        sh("ip", "-n", self.ns[host], "link", "set", self.dev[host], "down")

    def heal(self, host: str) -> None:
        sh("ip", "-n", self.ns[host], "link", "set", self.dev[host], "up")

    def close(self) -> None:
        for ns in self.ns.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)
        for link in self._links:
            subprocess.run(["ip", "link", "del", link], capture_output=True, timeout=20)
        self.ns.clear()
        self._links.clear()
