# SPDX-License-Identifier: Apache-2.0
"""The pip wheel ``mooncake-transfer-engine``, built by ``make wheel``.

Not a source build: packaging/wheel.mk stages the built tree next to a copy
of this file (the ``mooncake`` package with capi.py, _capi.so and
libmooncake.so.1, the daemons in mooncake/bin/) and runs
``setup.py bdist_wheel`` there, offline, with Debian's setuptools and wheel.
The version comes from configure (PACKAGE_VERSION) through
$MC_WHEEL_VERSION.

The distribution is named as upstream's wheel, so that a requirements line
``mooncake-transfer-engine`` is met by this wheel; the import package stays
``mooncake``.
"""

import os
import sys

from setuptools import find_packages, setup
from setuptools.dist import Distribution


class NativeDistribution(Distribution):
    """The package carries a CPython extension and native executables that
    setuptools did not build: say so, so that bdist_wheel tags the wheel for
    this interpreter and platform (cp3X-cp3X-linux_<arch>) and pip installs
    it into platlib, instead of a py3-none-any wheel."""

    def has_ext_modules(self):
        return True


version = os.environ.get("MC_WHEEL_VERSION")
if not version:
    sys.exit("setup.py: MC_WHEEL_VERSION is not set; build the wheel with `make wheel`")
if not os.path.isfile(os.path.join("mooncake", "_capi.so")):
    sys.exit("setup.py: mooncake/_capi.so is missing; run it in the tree `make wheel` stages")

setup(
    name="mooncake-transfer-engine",
    version=version,
    description="Mooncake Store and Transfer Engine: a distributed KV cache store (C core, Python bindings)",
    license="Apache-2.0",
    license_files=["LICENSE"],
    python_requires=">=3.8",
    packages=find_packages(include=["mooncake", "mooncake.*"]),
    package_data={"mooncake": ["_capi.so", "libmooncake.so.1", "bin/*"]},
    # numpy and torch are imported by the calls that need them, aiohttp by
    # the HTTP services: none is needed to import mooncake.store.
    extras_require={
        "numpy": ["numpy"],
        "torch": ["torch", "numpy"],
        "rest": ["aiohttp"],
    },
    entry_points={
        "console_scripts": [
            "mooncake_master = mooncake._commands:mooncake_master",
            "mooncake_client = mooncake._commands:mooncake_client",
            "mooncake_http_metadata_server = mooncake._commands:mooncake_http_metadata_server",
            "mooncake-cli = mooncake.cli:main",
            "mc_store_rest_server = mooncake.mooncake_store_service:sync_main",
        ],
    },
    zip_safe=False,
    distclass=NativeDistribution,
)
