"""Calibration profiles: a few physically meaningful correction factors, versioned and content-hashed.

A profile scales the composed step time per op class and adds the host-side work SGLang does every
iteration. Factors are multiplicative and default to 1.0 (trust the measurement tables); the CPU terms are
seconds. The ``profile_hash`` (first 12 hex digits of a SHA-256 over the canonical JSON of the factors) is
what `LatencyModel.profile_hash` exports, so a dashboard can tell which calibration produced a prediction.

Fitting keeps sufficient statistics (``fit_stats``) next to each factor so the live shadow can refit
incrementally: a least-squares ratio factor is Σ(measured·predicted) / Σ(predicted²), and both sums can be
updated one observation at a time (see simcore.perf.calibrate).
"""
from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from simcore.frozen_model import ConfigDict, Field, FieldError, FrozenModel

from simcore._sha256 import sha256
from simcore.errors import UserError

if TYPE_CHECKING:
    from pathlib import Path

# Factors added after the first profiles were written; 0.0 (their default) leaves a profile's hash unchanged.
_LATE_FACTORS = ("frontend_s", "gpu_per_req_s_by_version", "launch_s_per_mla_layer", "extend_s_per_layer",
                 "extend_s_per_layer_by_version", "fp4_moe_autotuned_scale", "fp8_moe_prefill_scale")
OP_CLASSES = ("gemm", "context_attention", "generation_attention", "communication", "moe", "elementwise")


class FitStat(FrozenModel):
    """Running sums for one ratio factor: k = sxy / sxx with x = predicted, y = measured."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    sxy: float = 0.0
    sxx: float = 0.0
    n: int = 0


class CalibrationProfile(FrozenModel):
    """Correction factors applied by the step-latency model.

    - ``op_scale[c]``: multiplies every op of class c (see OP_CLASSES);
    - ``cpu_base_s`` + ``cpu_per_req_s`` × requests + ``cpu_per_token_s`` × extend tokens: host work per
      iteration (scheduling, batch preparation, result processing), reported as StepTime.cpu_s;
    - ``launch_s_per_layer``: extra GPU time per layer when a step runs eagerly (no CUDA graph), the kernel
      launch gaps that graph replay removes;
    - ``launch_s_per_mla_layer``: the same floor for a layer of an MLA model (DeepSeek-V2/V3/R1, Kimi-K2: MLA
      attention + MoE), whose eager forward issues many more host-side ops per layer than a dense layer; 0 = use
      ``launch_s_per_layer``. Its value is a published measurement of SGLang (docs/accuracy.md §3.12).
    - ``step_overhead_s``: fixed GPU-side time per forward (embedding/sampling kernels, graph replay).
    - ``gpu_per_req_s``: GPU-stream time per request row per step outside the per-op tables: sampling,
      logits post-processing and the batch-preparation kernels that run outside the CUDA graph.
    - ``frontend_s``: fixed host latency of every request outside the scheduler loop (HTTP parsing, chat
      template, tokenization, the ZMQ hop to the scheduler, and the first token's way back through the
      detokenizer and the SSE writer). `simcore.engine.simulate` delays each request's arrival at the scheduler
      by it; the live shadow, which sees requests as the server logged them, does not add it.
    - ``gpu_per_req_s_by_version``: ``{last version: seconds}``, the per-row serialized time of SGLang versions
      whose decode step does more per-row work outside the overlapped part of the loop than the versions
      ``gpu_per_req_s`` was fitted on; a server of version v uses the entry with the smallest key ≥ v, else
      ``gpu_per_req_s`` (`for_version`; docs/accuracy.md §3.11).
    - ``extend_s_per_layer``: GPU-stream time added per layer to every step that computes prompt tokens (prefill
      or mixed: an eager forward), on top of the tables' kernels; 0 for the versions the tables were measured on.
    - ``extend_s_per_layer_by_version``: ``{last version: seconds}`` for it, resolved like
      ``gpu_per_req_s_by_version`` (`for_version`): SGLang 0.4.0's eager extend forward costs ~0.23 ms more per
      layer than the 0.5.x-measured tables (docs/accuracy.md §3.11).
    - ``fp4_moe_autotuned_scale``: the time of flashinfer's TRT-LLM FP4 MoE with the tactic SGLang's start-up
      autotune chose, as a fraction of the fallback tactic the MoE tables timed; it applies to the nvfp4 MoE calls
      that hit the tuning cache (`simcore.perf.moe_parallel`, ``fp4_moe_autotuned_tokens``). 0 = 1 (no correction).
      Calibrated on the B300 nvfp4 rows' fit split, capped by the HBM bound (docs/accuracy.md §3.12).
    - ``fp8_moe_prefill_scale``: how much longer the block-fp8 fused MoE of a serving SGLang (flashinfer's TRT-LLM
      fp8 block-scale MoE on SM100) spends above its memory floor than the kernel the MoE tables timed: the time
      of a call above the floor (the kernel's fixed latency + the touched experts' weights and the routed
      activations over HBM bandwidth) is multiplied by it, on SM90 and later, so memory-bound (decode-size) calls keep the table's
      time and prefill-size calls, whose time is the routed tokens' work, run that much slower
      (`simcore.perf.moe_parallel.fp8_moe_prefill_s`). 0 = 1 (no correction). Fitted on the fit split of the
      B200 fp8 rows of validation/sglang_deepseek_inferencex.csv (docs/accuracy.md §3.16).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = 1
    name: str = "default"
    source: str = "built-in defaults"
    op_scale: dict[str, float] = Field(default_factory=lambda: {c: 1.0 for c in OP_CLASSES})
    cpu_base_s: float = 0.0
    cpu_per_req_s: float = 0.0
    cpu_per_token_s: float = 0.0
    launch_s_per_layer: float = 0.0
    launch_s_per_mla_layer: float = 0.0
    step_overhead_s: float = 0.0
    gpu_per_req_s: float = 0.0
    frontend_s: float = 0.0
    gpu_per_req_s_by_version: dict[str, float] = Field(default_factory=dict)
    extend_s_per_layer: float = 0.0
    extend_s_per_layer_by_version: dict[str, float] = Field(default_factory=dict)
    fp4_moe_autotuned_scale: float = Field(0.0, ge=0.0, le=1.0)
    fp8_moe_prefill_scale: float = Field(0.0, ge=0.0)
    # Roofline efficiencies (fraction of peak reached), measured on the tabulated GPUs.
    roofline: dict[str, float] = Field(default_factory=dict)
    fit_stats: dict[str, FitStat] = Field(default_factory=dict)

    def scale(self, op_class: str) -> float:
        return self.op_scale.get(op_class, 1.0)

    @property
    def profile_hash(self) -> str:
        """Content hash over everything that changes predictions (not the name, source or fit sums)."""
        payload = self.model_dump(exclude={"name", "source", "fit_stats"})
        # factors added after version 1 enter the hash only when set, so older profiles keep their hashes
        for late in _LATE_FACTORS:
            if payload.get(late) in (0.0, {}):
                payload.pop(late)
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        return sha256(text.encode()).hexdigest()[:12]

    def for_version(self, sglang_version: str) -> "CalibrationProfile":
        """The profile as it applies to a server of ``sglang_version``: ``gpu_per_req_s`` and
        ``extend_s_per_layer`` replaced by the entries of their ``…_by_version`` tables with the smallest
        last-version key ≥ the version (itself when neither table has one)."""
        from simcore.settings import _version_tuple

        v = _version_tuple(sglang_version)
        update: dict[str, float] = {}
        for field, table in (("gpu_per_req_s", self.gpu_per_req_s_by_version),
                             ("extend_s_per_layer", self.extend_s_per_layer_by_version)):
            keys = sorted((_version_tuple(k), k) for k in table if _version_tuple(k) >= v)
            if keys:
                update[field] = table[keys[0][1]]
        return self.model_copy(update=update) if update else self

    def to_json(self) -> str:
        data = self.model_dump()
        data["profile_hash"] = self.profile_hash
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    def save(self, path: str | Path) -> None:
        """Write atomically (temp file then rename) so a reader never sees half a profile."""
        from pathlib import Path

        p = Path(path)
        tmp = p.with_suffix(p.suffix + ".tmp")
        tmp.write_text(self.to_json())
        tmp.replace(p)

    @classmethod
    def load(cls, path: str | Path) -> CalibrationProfile:
        """Read a profile file; a stored ``profile_hash`` that no longer matches the content is refused."""
        p = os.fspath(path)  # not pathlib (start-up)
        try:
            with open(p) as f:
                data = json.loads(f.read())
        except FileNotFoundError:
            raise UserError("--profile", f"no profile file at {p}", "run `shadowsim calibrate` to create one") from None
        except json.JSONDecodeError as exc:
            raise UserError("--profile", f"{p} is not valid JSON ({exc.msg})") from exc
        except UnicodeDecodeError:
            raise UserError("--profile", f"{p} is not a text file", "give a PROFILE.json from `shadowsim calibrate`") from None
        except IsADirectoryError:
            raise UserError("--profile", f"{p} is a directory", "give a PROFILE.json") from None
        if not isinstance(data, dict):
            raise UserError("--profile", f"{p} holds no JSON object", "give a PROFILE.json from `shadowsim calibrate`")
        stored = data.pop("profile_hash", None)
        try:
            prof = cls(**data)
        except FieldError as exc:
            err = exc.errors()[0]
            raise UserError("--profile", f"{p}: {'.'.join(map(str, err['loc'])) or 'profile'}: {err['msg']}",
                            "give a PROFILE.json from `shadowsim calibrate`") from None
        if stored is not None and stored != prof.profile_hash:
            raise UserError("--profile", f"{p}: content hash {prof.profile_hash} != stored {stored}",
                            "the file was edited by hand; re-run `shadowsim calibrate`")
        return prof


def default_profile_path() -> Path:
    from pathlib import Path

    return Path(_DEFAULT_PROFILE)


# os.path, not pathlib, on the simulate path: pathlib's import is ≈ 17 M instructions of start-up
_DEFAULT_PROFILE = os.path.join(os.path.dirname(__file__), "data", "default_profile.json")


def default_profile() -> CalibrationProfile:
    """The shipped profile (fitted by `shadowsim calibrate` on the measured tables), or neutral defaults."""
    if os.path.isfile(_DEFAULT_PROFILE):
        return CalibrationProfile.load(_DEFAULT_PROFILE)
    return CalibrationProfile()
