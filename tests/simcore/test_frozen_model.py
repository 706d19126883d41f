"""simcore.frozen_model: the pydantic-free records of the simulate path convert and refuse input as pydantic did.

Each field of ServerSettings, GpuSpec, ModelSpec, CalibrationProfile and FitStat is checked against a pydantic
model built from the same annotation and bounds (pydantic stays a dependency of the live shadow's config), over
a corpus of good and bad values: same accepted values, same converted results (type included), same refusals.
"""
from __future__ import annotations

import copy
import pickle
from typing import Any

import pydantic
import pytest

from simcore.errors import UserError
from simcore.frozen_model import FieldError, FrozenModel
from simcore.gpus import GpuSpec, load_gpu
from simcore.models import load_model
from simcore.models.spec import ModelSpec
from simcore.perf.profile import CalibrationProfile, FitStat, default_profile, default_profile_path
from simcore.settings import ServerSettings, resolve

RECORDS = (ServerSettings, GpuSpec, ModelSpec, CalibrationProfile, FitStat)
CORPUS: list[Any] = [
    True, False, 0, 1, -1, 2, 7, 2**70, 0.0, -0.0, 1.0, 1.5, 0.5, 1e20, float("inf"), float("nan"),
    "1", "0", "1.0", "1.5", " 2 ", "1_000", "1e3", "inf", "yes", "off", "T", "abc", "", "fcfs", "lpm", "lof",
    "deepep", "none", "EAGLE", "MTP", "bf16", "0.5.9", b"3", None, [1, 2], [3], ["a", "b"], (1,), (), {1, 2},
    {"a": 1}, {"a": "2"}, {"a": "x"}, {1: 2.0}, {"sxy": 1.0}, object(),
]


def _mirror(cls: type[FrozenModel], name: str) -> type[pydantic.BaseModel]:
    info = cls.model_fields[name]
    cls._checks or cls._compile()
    ann = info.annotation
    if "FitStat" in repr(ann):  # nested records: checked separately below
        pytest.skip("nested")
    bounds = {k: getattr(info, k) for k in ("ge", "gt", "le", "lt") if getattr(info, k) is not None}
    return pydantic.create_model("Mirror", __config__=pydantic.ConfigDict(extra="forbid"),
                                 x=(ann, pydantic.Field(..., **bounds)))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


@pytest.mark.parametrize("cls,name", [(c, n) for c in RECORDS for n in c.model_fields
                                      if not (c is CalibrationProfile and n == "fit_stats")])
def test_every_field_converts_and_refuses_as_pydantic_does(cls: type[FrozenModel], name: str) -> None:
    mirror = _mirror(cls, name)
    check = (cls._checks or cls._compile())[name]
    for value in CORPUS:
        try:
            want: Any = mirror(x=value).x
        except pydantic.ValidationError:
            want = FieldError
        try:
            got: Any = check(value, (name,))
        except FieldError as exc:
            assert exc.loc[0] == name and name in str(exc)
            got = FieldError
        assert _same(got, want), f"{cls.__name__}.{name} = {value!r}: ours {got!r}, pydantic {want!r}"


def test_nested_records_convert_and_name_the_path() -> None:
    p = CalibrationProfile(fit_stats={"gemm": {"sxy": "2.5", "sxx": 1, "n": "3"}})
    assert p.fit_stats["gemm"] == FitStat(sxy=2.5, sxx=1.0, n=3) and type(p.fit_stats["gemm"].sxx) is float
    with pytest.raises(FieldError, match=r"^fit_stats\.gemm\.n: should be a valid integer, got 'x'") as e:
        CalibrationProfile(fit_stats={"gemm": {"n": "x"}})
    assert e.value.errors()[0]["loc"] == ("fit_stats", "gemm", "n")
    with pytest.raises(FieldError, match=r"fit_stats\.gemm\.bogus: unknown field of FitStat"):
        CalibrationProfile(fit_stats={"gemm": {"bogus": 1}})
    assert p.model_dump()["fit_stats"] == {"gemm": {"sxy": 2.5, "sxx": 1.0, "n": 3}}


def test_bad_input_is_one_user_error_naming_the_field() -> None:
    with pytest.raises(FieldError, match=r"^page_size: should be greater than or equal to 1, got 0$") as e:
        ServerSettings(page_size=0)
    assert isinstance(e.value, UserError) and isinstance(e.value, ValueError) and e.value.field == "page_size"
    with pytest.raises(FieldError, match=r"^chunked_prefil_size: unknown field of ServerSettings .*did you mean "
                                         r"'chunked_prefill_size'"):
        ServerSettings(chunked_prefil_size=4096)
    with pytest.raises(FieldError, match=r"^memory_bytes: is required by GpuSpec"):
        GpuSpec(name="x", hbm_bytes_per_s=1.0, nvlink_bytes_per_s=1.0, peak_flops={"bf16": 1.0})
    with pytest.raises(FieldError, match=r"^schedule_policy: should be 'fcfs' or 'lpm'"):
        ServerSettings(schedule_policy="sjf")
    # the validators of the class still run, with their own errors
    with pytest.raises(UserError, match="^sglang_version: cannot read version"):
        ServerSettings(sglang_version="latest")
    with pytest.raises(UserError, match="^chunked_prefill_size: 32 is smaller than page_size 64"):
        ServerSettings(page_size=64, chunked_prefill_size=32)


def test_frozen_value_semantics_copy_and_pickle() -> None:
    s = resolve(ServerSettings(chunked_prefill_size="4096", tp_size=2), 80 * 2**30)
    assert s.chunked_prefill_size == 4096 and s.tp_size == 2
    with pytest.raises(AttributeError, match="frozen"):
        s.page_size = 16  # type: ignore[misc]
    assert s == resolve(ServerSettings(chunked_prefill_size=4096, tp_size=2), 80 * 2**30)
    assert s != ServerSettings() and hash(s) == hash(copy.copy(s))
    for clone in (pickle.loads(pickle.dumps(s)), copy.deepcopy(s), copy.copy(s), ServerSettings.model_validate(s)):
        assert clone == s and clone.model_fields_set == s.model_fields_set
    assert ServerSettings.model_validate({"page_size": 16}).page_size == 16
    # model_copy applies the update unchecked (as pydantic does) and counts it as set
    c = s.model_copy(update={"page_size": 0})
    assert c.page_size == 0 and s.page_size == 1 and "page_size" in c.model_fields_set
    assert "page_size" not in s.model_fields_set and {"chunked_prefill_size", "tp_size"} <= s.model_fields_set
    with pytest.raises(FieldError, match="unknown field"):
        s.model_copy(update={"no_such": 1})
    d = s.model_dump()
    assert list(d) == list(ServerSettings.model_fields) and d["cuda_graph_bs"] == s.cuda_graph_bs
    assert isinstance(d["cuda_graph_bs"], tuple) and isinstance(s.model_dump(mode="json")["cuda_graph_bs"], list)
    assert ServerSettings(**d) == s and dict(s) == d
    assert "page_size" not in s.model_dump(exclude={"page_size"}) and list(s.model_dump(include={"tp_size"})) == ["tp_size"]
    g = load_gpu("h100_sxm")
    with pytest.raises(TypeError):
        hash(g)  # a dict field: unhashable, as the pydantic model was
    assert pickle.loads(pickle.dumps(g)) == g and g.flops("bf16") > 0
    m = load_model("meta-llama/Llama-3.1-8B-Instruct")
    assert m.model_copy(update={"num_layers": 1}).num_layers == 1 and m.num_layers == 32 and hash(m) == hash(copy.copy(m))
    assert repr(m).startswith(f"ModelSpec(name={m.name!r}, architecture='LlamaForCausalLM', num_layers=32, ")


def test_the_shipped_profile_keeps_its_content_hash() -> None:
    """The profile's hash is over its canonical JSON dump: the file's stored hash must still match (load checks)."""
    import json
    stored = json.loads(default_profile_path().read_text())["profile_hash"]
    prof = default_profile()
    assert prof.profile_hash == stored
    assert CalibrationProfile.load(default_profile_path()) == prof
    assert CalibrationProfile().op_scale is not CalibrationProfile().op_scale  # a fresh default per instance


def test_before_validators_see_the_raw_input() -> None:
    """``model_validator(mode="before")`` runs on the raw mapping first (ServerSettings: SGLang turns DP attention
    off at --dp-size 1, server_args.py ``_handle_data_parallelism``), and what it returns is what gets checked."""
    assert ServerSettings(enable_dp_attention=True).enable_dp_attention is False
    s = ServerSettings(enable_dp_attention="yes", dp_size="2", tp_size=4)
    assert s.enable_dp_attention is True and s.dp_size == 2
    assert ServerSettings.model_validate({"enable_dp_attention": True, "dp_size": 1}).enable_dp_attention is False
