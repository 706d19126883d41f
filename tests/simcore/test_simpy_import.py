"""simcore._simpy: SimPy imported without ``importlib.metadata`` (start-up), and nothing else different.

Each case runs in a fresh interpreter: what is imported first is the point.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_simpy_through_simcore_does_not_load_importlib_metadata_and_keeps_its_version() -> None:
    got = _run("""
import json, sys
from simcore._simpy import simpy
before = sorted(m for m in ("importlib.metadata", "email", "zipfile", "csv") if m in sys.modules)
import importlib
attr_after = "metadata" in vars(importlib)
env = simpy.Environment()
done = []
def proc(env):
    yield env.timeout(2.5)
    done.append(env.now)
env.process(proc(env))
env.run()
lazy = "__version__" in vars(simpy)
version = simpy.__version__          # answered now, by the real importlib.metadata
import importlib.metadata as md
print(json.dumps({"before": before, "attr": attr_after, "done": done, "lazy": lazy, "version": version,
                  "real": md.version("simpy"), "real_is_module": hasattr(md, "distributions"),
                  "cached": vars(simpy)["__version__"], "same_module": sys.modules["simpy"] is simpy,
                  "names": sorted(n for n in ("Environment", "Event", "Process", "AllOf", "Resource", "Timeout")
                                  if hasattr(simpy, n))}))
""")
    assert got["before"] == [] and got["attr"] is False  # the stand-in left nothing behind
    assert got["done"] == [2.5]
    assert got["lazy"] is False and got["version"] == got["real"] == got["cached"] and got["version"]
    assert got["real_is_module"] and got["same_module"]
    assert got["names"] == ["AllOf", "Environment", "Event", "Process", "Resource", "Timeout"]


def test_an_unknown_simpy_attribute_is_still_an_attribute_error() -> None:
    got = _run("""
import json
from simcore._simpy import simpy
try:
    simpy.no_such_name
    err = None
except AttributeError as e:
    err = str(e)
print(json.dumps({"err": err}))
""")
    assert got["err"] == "module 'simpy' has no attribute 'no_such_name'"


def test_with_importlib_metadata_already_loaded_it_is_a_plain_import() -> None:
    got = _run("""
import json, sys
import importlib.metadata
real = sys.modules["importlib.metadata"]
from simcore._simpy import simpy
print(json.dumps({"eager": vars(simpy).get("__version__"), "hook": "__getattr__" in vars(simpy),
                  "same": sys.modules["importlib.metadata"] is real, "real": importlib.metadata.version("simpy")}))
""")
    assert got["eager"] == got["real"] and got["hook"] is False and got["same"] is True


def test_simpy_imported_first_is_the_module_simcore_uses() -> None:
    got = _run("""
import json, sys
import simpy
import simcore.engine, simcore.server, simcore._simpy
print(json.dumps({"same": simcore._simpy.simpy is simpy is simcore.server.simpy,
                  "version": vars(simpy).get("__version__")}))
""")
    assert got["same"] is True and got["version"]


def test_while_other_threads_run_it_is_a_plain_import() -> None:
    got = _run("""
import json, sys, threading
stop = threading.Event()
t = threading.Thread(target=stop.wait); t.start()
from simcore._simpy import simpy
stop.set(); t.join()
print(json.dumps({"metadata": "importlib.metadata" in sys.modules, "eager": vars(simpy).get("__version__")}))
""")
    assert got["metadata"] is True and got["eager"]


def test_a_thread_started_with_the_thread_module_counts_too() -> None:
    # threading.active_count() does not see threads started by `_thread` before `threading` was imported
    got = _run("""
import _thread, json, sys, time
lock = _thread.allocate_lock(); lock.acquire()
def wait():
    lock.acquire()
_thread.start_new_thread(wait, ())
time.sleep(0.05)
from simcore._simpy import simpy
lock.release()
print(json.dumps({"metadata": "importlib.metadata" in sys.modules, "eager": vars(simpy).get("__version__")}))
""")
    assert got["metadata"] is True and got["eager"]


def test_the_package_starts_with_its_core_modules_and_completes_on_first_other_name() -> None:
    got = _run("""
import json, sys
from simcore._simpy import simpy
first = sorted(m for m in sys.modules if m == "simpy" or m.startswith("simpy."))
import simpy.core, simpy.events, simpy.exceptions
core = {n: getattr(simpy, n) is getattr(m, n) for m, names in ((simpy.core, ("Environment",)),
        (simpy.events, ("AllOf", "AnyOf", "Event", "Process", "Timeout")),
        (simpy.exceptions, ("Interrupt", "SimPyException"))) for n in names}
from simpy import Store                      # the first other name runs SimPy's __init__
after = sorted(m for m in sys.modules if m == "simpy" or m.startswith("simpy."))
import simpy.resources.store
env = simpy.Environment(); store = Store(env); got = []
def put(env):
    yield store.put("x")
def get(env):
    got.append((yield store.get()))
env.process(put(env)); env.process(get(env)); env.run()
print(json.dumps({"first": first, "core": core, "after": after, "store": Store is simpy.resources.store.Store,
                  "got": got, "all": simpy.__all__, "toc": "autosummary" in (simpy.__doc__ or ""),
                  "metadata": "importlib.metadata" in sys.modules, "file": simpy.__file__.endswith("__init__.py"),
                  "env_same": simpy.Environment is simpy.core.Environment, "version": simpy.__version__}))
""")
    assert got["first"] == ["simpy", "simpy.core", "simpy.events", "simpy.exceptions"]
    assert all(got["core"].values()) and len(got["core"]) == 8
    assert "simpy.resources.store" in got["after"] and "simpy.rt" in got["after"]
    assert got["store"] and got["got"] == ["x"] and got["toc"] and got["file"] and got["env_same"]
    assert got["all"][:3] == ["AllOf", "AnyOf", "Container"] and "RealtimeEnvironment" in got["all"]
    assert got["metadata"] is False  # __init__ ran with the stand-in too; __version__ asked for it afterwards only
    assert got["version"]


def test_a_submodule_imported_before_the_package_completes_works_and_an_unknown_name_still_fails() -> None:
    got = _run("""
import json, sys
from simcore._simpy import simpy
import simpy.rt                              # a submodule, before any other name of the package
rt = simpy.rt.RealtimeEnvironment(factor=1e-6)
loaded_before = "simpy.resources" in sys.modules
try:
    simpy.no_such_name                       # completes the package, then fails as before
    err = None
except AttributeError as e:
    err = str(e)
print(json.dumps({"rt": type(rt).__name__, "loaded_before": loaded_before, "err": err,
                  "complete": "Resource" in vars(simpy), "hook": type(vars(simpy).get("__getattr__")).__name__}))
""")
    assert got["rt"] == "RealtimeEnvironment" and got["loaded_before"] is False
    assert got["err"] == "module 'simpy' has no attribute 'no_such_name'" and got["complete"] is True
    assert got["hook"] == "function"  # the completion hook is gone; __version__'s lookup is left

