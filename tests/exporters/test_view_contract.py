"""exporters/ depends on nothing of the shadow: its input contract (exporters.view) is defined here, and
shadowsim.shadow builds those views. Guards against the import cycle exporters ↔ shadowsim.shadow returning."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

EXPORTERS = Path(__file__).resolve().parents[2] / "exporters"


def test_no_exporters_module_imports_shadowsim() -> None:
    offenders = []
    for path in sorted(EXPORTERS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "shadowsim"]
    assert offenders == []
    assert (EXPORTERS / "view.py").is_file()


def test_importing_the_exporter_loads_no_shadowsim_module() -> None:
    code = ("import sys, exporters.prometheus, exporters.view; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'shadowsim'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_the_shadow_builds_the_exporters_view_types() -> None:
    import exporters.view as contract
    import shadowsim.shadow.view as builder

    # same classes, not copies: the collector's isinstance-free duck typing and the demo UI read the same records
    assert builder.InstanceView is contract.InstanceView and builder.ShadowView is contract.ShadowView
    assert builder.build_view.__annotations__["return"] in ("ShadowView", contract.ShadowView)
