"""The compiled modules (setup.py's NATIVE_MODULES, Cython) compute exactly what their .py sources compute.

The same simulations run in two fresh interpreters, one importing the compiled extensions and one with
``SHADOWSIM_PURE_PYTHON=1`` (the .py sources, simcore/_native.py); every result must be identical (a digest of
every record, ITL sample and weight, step count, simulated time, KV peak and retraction count). The compiled run
must really have imported every module that was built (so CI, whose ``make venv`` builds them, proves the
compiled path), and the pure run none. The finder's two rules (the env var; a build older than its source is not
used, with a warning) are checked on files of known age.
"""
from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from simcore import _native
from tests.native_build import REPO, built_file, native_modules

# The child: several simulations that exercise every compiled module (radix match/insert/split/evict with a pool
# small enough to retract, chunked prefill, overlap on and off, decode runs exact and interpolated, page size 16,
# EOS/length finishes, a roofline TP-2 model, a closed loop), then one digest of all their results.
_CHILD = r"""
import dataclasses, hashlib, json, random, struct, sys
sys.path.insert(0, sys.argv[2])
from simcore import _native
from simcore.engine import simulate
from simcore.gpus import load_gpu
from simcore.models import load_model
from simcore.perf import build_latency_model
from simcore.request import RequestSpec
from simcore.settings import ServerSettings, resolve
from simcore.workload import ClosedLoop, TraceReplay, Uniform
from streams.traces import read_trace

h100 = load_gpu("h100_sxm")
llama = load_model("meta-llama/Llama-3.1-8B-Instruct")
table = build_latency_model(llama, h100, 1, "bf16")
roof = build_latency_model(llama, h100, 2, "bf16", backend="roofline")
trace = read_trace(sys.argv[1], limit=1500).requests
rnd = random.Random(7)
mixed, t = [], 0.0
for i in range(300):
    t += rnd.expovariate(6.0)
    outl = rnd.randint(1, 500)
    mixed.append(RequestSpec(f"m{i}", t, rnd.randint(50, 3000), outl, rnd.choice([outl, outl + 40, None]), None,
                             1, False))
def s(**kw):
    return resolve(ServerSettings(**kw), h100.memory_bytes)
runs = [
    (s(), table, TraceReplay(trace), dict(kv_capacity_tokens=414_145, key_unit=512)),
    (s(), table, TraceReplay(trace, time_scale=0.25), dict(kv_capacity_tokens=120_000, key_unit=512)),
    (s(disable_overlap_schedule=True), table, TraceReplay(trace[:600]),
     dict(kv_capacity_tokens=60_000, key_unit=512, decode_run_spacing=0)),
    (s(page_size=16, schedule_policy="lpm"), table, TraceReplay(trace[:500]), dict(kv_capacity_tokens=200_000,
                                                                               key_unit=512)),
    (s(tp_size=2), roof, mixed, dict(kv_capacity_tokens=90_000)),
    (s(), table, ClosedLoop(16, 150, Uniform(100, 2500), Uniform(1, 400), seed=3,
                                       shared_prefix_len=300), dict(kv_capacity_tokens=50_000)),
]
h = hashlib.sha256()
for settings, lat, wl, kw in runs:
    res = simulate(settings, lat, wl, **kw)
    for r in res.records:
        h.update(repr(dataclasses.astuple(r)).encode())
    h.update(struct.pack(f"{len(res.itl_values_s)}d", *res.itl_values_s))
    h.update(repr(list(res.itl_weights)).encode())
    h.update(repr((res.steps, res.sim_time_s, res.kv_peak_usage, res.num_retractions)).encode())
files = {m: sys.modules[m].__file__ for m in sys.modules if m.startswith(("simcore.", "streams."))}
print(json.dumps({"digest": h.hexdigest(), "compiled": list(_native.compiled_modules()),
                  "stale": list(_native.stale_modules()), "files": files}))
"""


def _child(shared_dir: Path, pure: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != _native.PURE_PYTHON_ENV}
    if pure:
        env[_native.PURE_PYTHON_ENV] = "1"
    out = subprocess.run([sys.executable, "-c", _CHILD, str(shared_dir / "data" / "mooncake" /
                                                           "conversation_trace.jsonl"), str(REPO)],
                         env=env, cwd=REPO, capture_output=True, text=True, check=False, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_compiled_and_pure_python_give_identical_results(shared_dir: Path) -> None:
    # the simulation's modules (the streams ones are checked by tests/streams/test_native_streams.py)
    modules = tuple(m for m in native_modules() if m.startswith("simcore."))
    built = [m for m in modules if built_file(m) is not None]
    if not built:
        if os.environ.get("CI"):
            pytest.fail(f"no compiled module built for {modules} (CI builds them: `make venv`)")
        pytest.skip(f"no compiled module built for {modules} (no C compiler or Cython?): `make native` builds them")
    compiled, pure = _child(shared_dir, pure=False), _child(shared_dir, pure=True)
    assert compiled["stale"] == [], (f"compiled modules older than their source: {compiled['stale']}; rebuild "
                                     "with `make native` (python setup.py build_ext --inplace)")
    assert sorted(compiled["compiled"]) == sorted(built), "a built module was not the one imported"
    for m in built:
        assert compiled["files"][m] == str(built_file(m)), m
        assert pure["files"][m].endswith(".py"), pure["files"][m]
    assert pure["compiled"] == []
    if os.environ.get("CI"):
        assert built == list(modules), f"not built: {sorted(set(modules) - set(built))}"
    assert compiled["digest"] == pure["digest"]


def test_every_native_module_has_its_source_in_the_package() -> None:
    modules = native_modules()
    assert len(set(modules)) == len(modules)
    for m in modules:
        assert m.startswith(_native.PACKAGES), m
        assert (REPO / Path(*m.split("."))).with_suffix(".py").is_file(), m


def _fake_build(tmp_path: Path, so_age_s: float) -> None:
    (tmp_path / "radix_cache.py").write_text("x = 1\n")
    so = tmp_path / ("radix_cache" + importlib.machinery.EXTENSION_SUFFIXES[0])
    so.write_bytes(b"")
    now = os.stat(tmp_path / "radix_cache.py").st_mtime
    os.utime(so, (now - so_age_s, now - so_age_s))


def test_a_build_older_than_its_source_is_not_used_and_warns(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # the finder's own rule, whatever SHADOWSIM_PURE_PYTHON the test run has (with it set, nothing compiled is looked at)
    monkeypatch.setattr(_native, "PURE_PYTHON", False)
    _fake_build(tmp_path, so_age_s=60.0)
    with pytest.warns(RuntimeWarning, match="stale .*radix_cache.* older than its .py source.*make native"):
        spec = _native.NativeOrSourceFinder.find_spec("simcore.radix_cache", [str(tmp_path)])
    assert spec is not None and spec.origin == str(tmp_path / "radix_cache.py")
    assert type(spec.loader) is importlib.machinery.SourceFileLoader


def _two_module_build(tmp_path: Path) -> Path:
    """A fake build of two modules of one package, written a second after their sources."""
    pkg = tmp_path / "simcore"
    pkg.mkdir(parents=True)
    for name in ("radix_cache", "kv_cache"):
        (pkg / f"{name}.py").write_text("x = 1\n")
        (pkg / f"{name}.pxd").write_text("")
        so = pkg / (name + importlib.machinery.EXTENSION_SUFFIXES[0])
        so.write_bytes(b"")
        now = os.stat(pkg / f"{name}.py").st_mtime
        os.utime(so, (now + 1.0, now + 1.0))
    return pkg


def _touch_later(path: Path) -> None:
    later = os.stat(path).st_mtime + 60.0
    os.utime(path, (later, later))


@pytest.mark.parametrize("edited", ["kv_cache.py", "kv_cache.pxd"])
def test_one_stale_module_makes_the_whole_build_import_from_source(tmp_path: Path, edited: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # compiled modules cimport each other's extension types: radix_cache compiled beside kv_cache from source fails
    # at import (Cython's "size changed" check), so one stale source or .pxd turns the whole build off, with a warning
    monkeypatch.setattr(_native, "PURE_PYTHON", False)
    pkg = _two_module_build(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        spec = _native.NativeOrSourceFinder.find_spec("simcore.radix_cache", [str(pkg)])
    assert spec is not None and type(spec.loader) is importlib.machinery.ExtensionFileLoader
    other = tmp_path / "again"
    pkg = _two_module_build(other)
    _touch_later(pkg / edited)
    with pytest.warns(RuntimeWarning, match="stale .*kv_cache.*importing every compiled module from its .py source"):
        spec = _native.NativeOrSourceFinder.find_spec("simcore.radix_cache", [str(pkg)])
    assert spec is not None and spec.origin == str(pkg / "radix_cache.py")
    assert type(spec.loader) is importlib.machinery.SourceFileLoader


def test_a_fresh_build_is_used_and_the_env_var_forces_the_source(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_build(tmp_path, so_age_s=-1.0)  # written a second after its source
    monkeypatch.setattr(_native, "PURE_PYTHON", False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        spec = _native.NativeOrSourceFinder.find_spec("simcore.radix_cache", [str(tmp_path)])
    assert spec is not None and type(spec.loader) is importlib.machinery.ExtensionFileLoader
    monkeypatch.setattr(_native, "PURE_PYTHON", True)
    spec = _native.NativeOrSourceFinder.find_spec("simcore.radix_cache", [str(tmp_path)])
    assert spec is not None and spec.origin == str(tmp_path / "radix_cache.py")
    # modules outside simcore/streams are left to the standard finders
    assert _native.NativeOrSourceFinder.find_spec("json", None) is None
