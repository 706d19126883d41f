"""Test support: the system programs some tests run for real (promtool, prometheus, amtool, chromium).

``require_tool`` returns the program's path. When it is missing the test is skipped with the reason and how to
get it (`make test` installs the Debian packages when it runs as root with apt), except under CI (``CI`` set),
where every test must run and a missing tool fails the test.
"""
from __future__ import annotations

import os
import shutil

import pytest

PACKAGES = {"promtool": "prometheus", "prometheus": "prometheus", "amtool": "prometheus-alertmanager",
            "chromium": "chromium"}


def require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is not None:
        return path
    package = PACKAGES.get(name, name)
    reason = (f"`{name}` is not installed (Debian package {package}; `make test` installs it when run as root "
              "with apt, CI runs this test)")
    if os.environ.get("CI"):
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)
