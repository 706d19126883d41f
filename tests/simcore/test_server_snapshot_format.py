"""The server snapshot's format: readable names (version 2), and version-1 snapshots (one-letter keys) still restore."""
import json

import simpy

from simcore.perf.base import LinearLatencyModel
from simcore.request import RequestSpec
from simcore.server import Server
from simcore.server_snapshot import SNAPSHOT_VERSION, upgrade_snapshot
from simcore.settings import ServerSettings


def _half_run() -> tuple[Server, simpy.Environment]:
    env = simpy.Environment()
    srv = Server(env, ServerSettings(), 10_000, LinearLatencyModel())
    for i in range(6):
        srv.submit(RequestSpec(f"r{i}", 0.01 * i, 100 + 10 * i, 40, 40))
    env.run(until=0.1)
    return srv, env


def _as_version_1(snap: dict) -> dict:
    old = {"decode_launches": "G", "decoding": "R", "awaiting_result": "F"}
    old_req = {"out_len_base": "o0", "launches_base": "g0", "in_decoding": "in_r"}
    v1 = {old.get(k, k): v for k, v in snap.items()}
    v1["reqs"] = [{old_req.get(k, k): v for k, v in d.items()} for d in snap["reqs"]]
    v1["version"] = 1
    return v1


def test_snapshot_names_say_what_they_hold():
    srv, _ = _half_run()
    snap = srv.snapshot()
    assert snap["version"] == SNAPSHOT_VERSION == 2
    assert {"decode_launches", "decoding", "awaiting_result"} <= snap.keys()
    assert not {"G", "R", "F"} & snap.keys()
    assert snap["decoding"], "the half-run must have requests decoding for the test to mean anything"


def test_version_1_snapshot_restores_to_the_same_run():
    srv, env = _half_run()
    snap = json.loads(json.dumps(srv.snapshot()))
    env.run()
    expected = sorted((r.rid, r.first_token_s, r.finish_s) for r in srv.records)
    for variant in (snap, _as_version_1(snap)):
        env2 = simpy.Environment(initial_time=snap["now"])
        srv2 = Server.restore(env2, variant, ServerSettings(), LinearLatencyModel())
        env2.run()
        got = sorted((r.rid, r.first_token_s, r.finish_s) for r in srv2.records)
        assert got == expected and len(got) == 6


def test_unknown_snapshot_version_is_a_clear_error():
    import pytest
    with pytest.raises(ValueError, match="version 7"):
        upgrade_snapshot({"version": 7, "reqs": []})
