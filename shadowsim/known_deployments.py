"""Known public benchmark deployments: how a measurement row is recognised, and the server and client it really ran.

A measurement means nothing without the launch flags and the client's protocol. Some measurement files carry
neither (or a reconstruction): ``../shared/data/validation/sglang_deepseek_b200_b300.csv`` has aiconfigurator's
*reconstructed* ``server_args`` (``--enable-mixed-chunk --max-prefill-tokens isl+1500``, its README says so), while
its rows are InferenceX database records (SemiAnalysisAI/InferenceX) whose launch scripts and client are public
(docs/accuracy.md §3.12–3.15). This module is the registry of such deployments, as data: `DEPLOYMENTS` lists them;
`recognise` says which one a record (a CSV row of the validation format, strings) measured; `as_deployed` rewrites
the records of a file so that ``shadowsim validate`` (``--deployment as-deployed``, the default) simulates each
recognised row as its published deployment; ``validation/build_deepseek_inferencex.py`` derives its CSVs from the
same entries.

**Recognising a row** (`recognise`, every condition must hold):

- the id is an InferenceX record id: ``dsr1_<runner>_sglang_<fp8|fp4>_agg_<ISL>x<OSL>_c<C>_cfg<N>`` (aiconfigurator's
  InferenceX adapter, ai-dynamo/aiconfigurator @095f58a ``sdk/config_adapter/inferencex.py``) or the dated form
  ``<YYYY_MM_DD>_deepseek_r1_<runner>_sxm_sglang_<fp8|fp4>_agg_<ISL>x<OSL>_c<C>_tp<T>[_0]_ep<E>[_0]_<N>``, and its
  runner, precision, ISL, OSL and C agree with the row's ``gpu``, ``precision``, ``isl``, ``osl``, ``concurrency``;
- ``gpu``, ``precision`` and ``sglang_version`` are the configuration's (``nvfp4`` is InferenceX's ``fp4``);
- (``tp``, ``ep``, ``isl``, ``osl``, C) is a point of one branch of the configuration's search space
  (``nvidia-master.yaml``: C from ``conc-start`` to ``conc-end`` by doubling). A ``cfg`` row whose ``tp`` column is
  tp × ep (the file files DeepSeek-V3 twins of R1 runs with ``tp`` 16 / ``ep`` 4 and 64 / 8: 14 bit-identical
  pairs, validation/build_deepseek_deployed.py) is read at ``tp / ep`` where that is a point and ``tp`` is not;
- a ``cfg<N>`` id must carry one of the branch's database config ids (``cfg87`` is dsr1-fp8-b200-sglang's TP8
  branch, and so on). Dated ids carry none: the only configuration with two candidates is B200 0.5.9 fp8 TP8 EP1
  (dsr1-fp8-b200-sglang and its EAGLE twin dsr1-fp8-b200-sglang-mtp); a dated row there is the plain
  configuration only when it is the same run as a ``cfg87`` row (`as_deployed`, the twins below), else the EAGLE
  one (every dated TP8 EP1 fp8 0.5.9 row that is no ``cfg87`` twin has the EAGLE signature: TPOT 11–33% below the
  plain runs at small C, and C up to 512, outside the plain space).

**Duplicated measurements.** The file holds the same run under two ids (the 14 V3/R1 twins, ``cfg87`` points refiled
under dated ids, dated ids refiled on 2026-04-06): same GPU, precision, tp, ep, ISL, OSL, C and TTFT/TPOT equal to
1e-15 relative. `as_deployed` simulates every copy as the first one: its model, tp, ep, flags and client.

**Flags not simulated** are listed per configuration (``not_simulated``) and in the row's note. Rows with other
recorded ``server_args`` than the reconstruction are trusted as recorded (`is_reconstruction`).

**Deployments with assumed parts** (`KnownDeployment.assumed`). The rows below match no configuration of today's
``nvidia-master.yaml``; their history (InferenceX's git history, docs/accuracy.md §3.15) establishes most of the
deployment but not all. They are registered (``dsr1-tmpl-fp4-b200-sglang``, ``dsr1-fp8-b200-sgl-ep8``,
``dsr1-fp8-b200-sglang-0.5.6``) with each unknown part chosen by a stated rule, not by fit (the rows had been simulated with one candidate
deployment each while the history was read; the other choice's figures are in docs/accuracy.md §3.15): (1) where the history allows both, the record's own labels
are true (cfg199's ``ep 8``: the script ran EP8 from d1d2c82b8, hence the v0.5.5 image every ep-8 config named from
then on); (2) the runner node, which sets the prompt count and warm-up, is the majority of the runner pool's nodes
able to run the job at the record's dates (node-time weighted where the pool changed): cfg88 / cfg99: the b200 pool
of ``runner-sweep-test.yml`` @93fba3b8d is b200-nv_0/1 (slurm, with no ``dsr1_fp4_b200_slurm.sh``: they cannot run
this job), b200-nvd_0/1 (docker, 50·C / 20·C prompts) and b200-tg_0 (docker, 10·C): nvd; cfg199: ``runners.yaml``
b200 = b200-nvd_0..3 only (established, 50·C / 20·C); the 0.5.6 row: ``runners.yaml`` b200 = 6 docker (nvd_0..3,
dgxc_1/2, 50·C) + 4 slurm nodes (nv_0/1, nb_0/1, 10·C) from ea181ae6d (2025-12-31) to 3858fefd2 (2026-01-12), 2 + 4
on the image window's last day: docker. Their rows' assumptions begin with `PARTLY_ASSUMED_PREFIX` and name every
assumed part (``ASSUMED: …``); the other choice's effect is in docs/accuracy.md §3.15. Nothing models the cfg88 /
cfg99 rows' cold start (below): their TTFT is reported as what the deployment explains and what it does not.

The history of those rows (before they were registered they stayed on the file's flags, `unknown_reason`, which
still labels any InferenceX id no entry matches):

- ``cfg88`` (18 nvfp4 rows labelled TP4 EP1) and ``cfg99`` (18, TP8 EP1), no SGLang version: their 18 points each
  (three lengths, C 4…128, TP8 8192×1024 up to C 128) are the B200 SGLang fp4 job of ``.github/workflows/
  dsr1-tmpl.yml`` (``tp-list [4,8]``, ``conc-list [4…128]``; @93fba3b8d, 2025-10-26), which ran before the
  ``nvidia-master.yaml`` configurations (from d021eb362, 2025-10-27; there TP8 8192×1024 stops at C 16): image
  ``lmsysorg/sglang:v0.5.3rc1-cu129-b200`` (2025-09-19 … 2025-11-10), model nvidia/DeepSeek-R1-0528-FP4 (v1),
  ``benchmarks/dsr1_fp4_b200_docker.sh`` with ``--enable-ep-moe`` (SGLang then sets ep_size = tp_size: the record's
  ep 1 is the workflow's label, not the server's), ``--cuda-graph-max-bs 256 --max-running-requests 256
  --mem-fraction-static 0.85 --kv-cache-dtype fp8_e4m3 --chunked-prefill-size 16384 --scheduler-recv-interval
  {10, 30 from C 16} --stream-interval 10``; client kimbochen/bench_serving cloned at run time
  (``runners/launch_b200-nvd.sh``): ``--num-prompts`` 50·C (20·C at OSL 8192), **no warm-up** (InferenceX added
  ``--num-warmups`` on 2026-01-21, d053ae24e), and from 2025-10-06 (15b7c00b0) no persistent FlashInfer JIT cache
  on that runner, so the first requests of each run pay the kernels' JIT compilation. That is the likeliest cause of
  their 5–9 s TTFTs at 1024-token prompts (C ≥ 32) and 5–12 s at 8192 (a stall inside the measured window, of a size
  nothing records). Simulated with all of the above (EP = TP, those flags, 50·C prompts, no warm-up; SGLang 0.5.3
  rules), four 1024 × 1024 rows give TTFT 0.15–0.35 s against 0.42 s (cfg99 C 8), 0.89 s (cfg88 C 16), 7.1 s (cfg88
  C 32) and 8.6 s (cfg99 C 32), TPOT within 1–10% but cfg99 C 32 (−24%): the recorded deployment explains the
  decode, not the TTFT. Not registered: the runner (below), hence the prompt count, is not recorded.
- ``cfg199`` (15 fp8 rows labelled TP64 EP8 = TP8 EP8, no version): the 15 points are dsr1-fp8-b200-sglang's space
  with ``ep: 8`` (three lengths, C 4…64) from d021eb362 (2025-10-27); its script launched without any EP flag until
  d1d2c82b8 (2025-11-09, ``--ep-size $EP_SIZE``), so the runs before that ran EP1 under an ``ep 8`` label, those
  after EP8, on v0.5.3rc1 or v0.5.5 (image of 2025-11-10): which the rows are is not recorded. Not registered.
- the 0.5.6 R1 TP8 fp8 row (``..._8192x1024_c64_tp8_0_ep1_0_1288``): dsr1-fp8-b200-sglang with image
  ``v0.5.6-cu129-amd64`` held 8192×1024 TP8 at C 4…64 only from d27433dff (2025-12-31) to 1d29967c4 (2026-01-13);
  its TP8 launch line is the 0.5.9 one, and bench_serving had no warm-up then (d053ae24e). But the prompt count
  depended on the machine: the ``b200`` runner pool (``.github/configs/runners.yaml``) held docker nodes
  (``launch_b200-dgxc.sh``: 50·C prompts at OSL 1024 for DeepSeek-R1) and slurm nodes (``launch_b200-nb.sh`` →
  ``benchmarks/dsr1_fp8_b200_slurm.sh``: 10·C), and the record does not say which ran it (from d053ae24e on every
  runner calls ``run_benchmark_serving`` with 10·C and 2·C warm-up, so the 0.5.9 / 0.5.10 rows are unambiguous). Not
  registered. (Simulated with the docker nodes' 50·C and no warm-up it gives TTFT 963 ms against 3,090 ms measured
  and TPOT 32.2 against 40.6 ms; the file's flags give 1,571 ms / 48.5 ms.)

The cfg88 / cfg99 rows share that ambiguity (the dsr1-tmpl.yml era's ``b200`` pool had ``launch_b200-nvd.sh``, 50·C /
20·C prompts, and ``launch_b200-tg.sh``, 10·C) besides their SGLang 0.5.3rc1 and the FP4 v1 checkpoint.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

REPO = "SemiAnalysisAI/InferenceX"
# the flags aiconfigurator's generator writes (simcore.perf.validation.generator_server_args), in any order
_RECONSTRUCTED = ({"--max-prefill-tokens {mpt}"}, {"--enable-mixed-chunk", "--max-prefill-tokens {mpt}"})
# server tokens per client-counted prompt token on the B300 0.5.10.post1 runs, by isl (validation/
# client_tokenizer_inflation.py: Σ server / Σ client tokens over 80 prompts of sample_random_requests, seed 0, range
# ratio 0.8; transformers 5.3.0's DeepSeek tokenizer unrepaired on the client until InferenceX @5fe6d56ee)
B300_TOKEN_FACTOR = {1024: "5.16", 8192: "5.18"}
# CPU µs per prompt token of SGLang 0.5.9's tokenizer manager encoding these prompts (validation/tokenizer_cost.py:
# 80 prompts of sample_random_requests per isl, DeepSeek-V3/R1 tokenizer.json, tokenizers 0.22.2; docs/accuracy.md
# §3.14). B200 rows only: the B300 prompts are other text (decoded by transformers 5.3.0's broken tokenizer)
B200_TOKENIZE_US_PER_TOKEN = {1024: "7.26", 8192: "5.93"}
_NOT_SIMULATED_FP8 = ("--enable-flashinfer-allreduce-fusion --attention-backend trtllm_mla --moe-runner-backend "
                      "flashinfer_trtllm --quantization fp8 --data-parallel-size 1")
_NOT_SIMULATED_FP4 = ("--enable-flashinfer-allreduce-fusion --enable-symm-mem --attention-backend trtllm_mla "
                      "--moe-runner-backend flashinfer_trtllm --quantization modelopt_fp4 --data-parallel-size 1")
_NOT_SIMULATED_MTP = " SGLANG_ENABLE_SPEC_V2=1 --fp8-gemm-backend flashinfer_trtllm --use-chat-template"


def recv_interval(concurrency: int) -> int:
    """``SCHEDULER_RECV_INTERVAL`` of the scripts' TP8 / fp4 / MTP branches: 30 from 16 clients on, else 10."""
    return 30 if concurrency >= 16 else 10


def fp8_tp8_flags(concurrency: int, ep: int = 1) -> str:
    """``dsr1_fp8_b200.sh`` @12ba0ae07 (and ``dsr1_fp8_b300.sh`` @5b302f147, a copy), TP 8 branch: the modelled flags."""
    return (f"--cuda-graph-max-bs 128 --max-running-requests 128 --mem-fraction-static 0.82 "
            f"--kv-cache-dtype fp8_e4m3 --chunked-prefill-size 32768 --max-prefill-tokens 32768 "
            f"--scheduler-recv-interval {recv_interval(concurrency)} --disable-radix-cache --stream-interval 30 "
            f"--ep-size {ep}")


def fp8_tp4_flags(concurrency: int, ep: int = 1) -> str:
    """``dsr1_fp8_b200.sh`` TP 4 branch (8192 × 1024 only): recv interval always 10."""
    return (f"--cuda-graph-max-bs 32 --max-running-requests 32 --mem-fraction-static 0.95 "
            f"--kv-cache-dtype fp8_e4m3 --chunked-prefill-size 8192 --max-prefill-tokens 8192 "
            f"--scheduler-recv-interval 10 --disable-radix-cache --stream-interval 30 --ep-size {ep}")


def fp4_flags(concurrency: int, ep: int) -> str:
    """``dsr1_fp4_b200.sh`` @12ba0ae07 (``dsr1_fp4_b300.sh`` @9ebeafb4e alike); ``--max-prefill-tokens`` not given."""
    return (f"--cuda-graph-max-bs 256 --max-running-requests 256 --mem-fraction-static 0.85 "
            f"--kv-cache-dtype fp8_e4m3 --chunked-prefill-size 16384 --ep-size {ep} "
            f"--scheduler-recv-interval {recv_interval(concurrency)} --disable-radix-cache --stream-interval 10")


def eagle_flags(concurrency: int, ep: int = 1) -> str:
    """``dsr1_fp8_b200_mtp.sh`` @12ba0ae07 (TP 8 only): the modelled flags, EAGLE 2 steps / 3 draft tokens."""
    return (f"--cuda-graph-max-bs 512 --max-running-requests 512 --mem-fraction-static 0.82 "
            f"--kv-cache-dtype fp8_e4m3 --chunked-prefill-size 16384 --max-prefill-tokens 16384 "
            f"--scheduler-recv-interval {recv_interval(concurrency)} --disable-radix-cache --stream-interval 30 "
            f"--ep-size {ep} --speculative-algorithm EAGLE --speculative-num-steps 2 --speculative-num-draft-tokens 3 "
            f"--speculative-eagle-topk 1")


def _doubling(start: int, end: int) -> tuple[int, ...]:
    out, c = [], start
    while c <= end:
        out.append(c)
        c *= 2
    return tuple(out)


@dataclass(frozen=True)
class Branch:
    """One ``search-space`` entry group of a configuration: a (tp, ep) with its points and the script's flags."""

    tp: int
    ep: int
    points: Mapping[tuple[int, int], tuple[int, ...]]  # (isl, osl) -> concurrencies
    flags: Callable[[int, int], str]  # (concurrency, ep) -> the modelled launch flags
    cfg_ids: tuple[int, ...] = ()  # InferenceX database config ids of this branch's ``..._cfg<N>`` records
    dated_ids: bool = True  # dated ids are this branch's runs (False: only as the same run as a cfg row)
    ep_run: int | None = None  # the ep the server ran when it differs from the record's label (``--enable-ep-moe``)

    def has(self, isl: int, osl: int, concurrency: int) -> bool:
        return concurrency in self.points.get((isl, osl), ())


@dataclass(frozen=True)
class KnownDeployment:
    """A public benchmark configuration: its server, its client and where they are written."""

    name: str  # the configuration's name in nvidia-master.yaml
    runner: str  # InferenceX runner (b200, b300)
    gpu: str  # shadowsim GPU name
    precision: str  # the validation file's precision (fp8, nvfp4)
    sglang_version: str
    image: str
    commit: str  # InferenceX commit whose config and script the flags are read from
    script: str
    branches: tuple[Branch, ...]
    not_simulated: str
    # the client: InferenceX's bench_serving (``benchmarks/benchmark_lib.sh`` run_benchmark_serving)
    prompts_per_client: Callable[[int], int] = lambda osl: 10  # --num-prompts = this × C (by osl)
    warmups_per_client: int = 2  # --num-warmups = this × C (awaited before the run)
    random_range_ratio: str = "0.8"  # RANDOM_RANGE_RATIO of .github/workflows/benchmark-tmpl.yml
    seed: str = "0"  # bench_serving --seed default
    server_tokens_per_prompt_token: Mapping[int, str] = field(default_factory=dict)  # by isl (blank: 1)
    server_tokenize_us_per_token: Mapping[int, str] = field(default_factory=dict)  # by isl (blank: not modelled)
    evidence: str = ""
    # the sglang_version column its records carry when it is not ``sglang_version`` ("": the file leaves it blank)
    record_version: str | None = None
    # the parts of the deployment that no record establishes, each with the rule that chose it (a stated rule, not
    # a fit; docs/accuracy.md §3.15): non-empty makes its rows "partly assumed"
    assumed: tuple[str, ...] = ()

    @property
    def source(self) -> str:
        return f"{REPO}@{self.commit} {self.script}"

    @property
    def label(self) -> str:
        return f"InferenceX {self.name} ({self.source})"


_B200_FP8_SPACE_TP8 = {(1024, 1024): _doubling(4, 64), (1024, 8192): _doubling(4, 64), (8192, 1024): (4,)}
_TP4_8K = {(8192, 1024): _doubling(4, 32)}

DEPLOYMENTS: tuple[KnownDeployment, ...] = (
    KnownDeployment(
        name="dsr1-fp8-b200-sglang", runner="b200", gpu="b200_sxm", precision="fp8", sglang_version="0.5.9",
        image="lmsysorg/sglang:v0.5.9-cu130", commit="12ba0ae07", script="benchmarks/single_node/dsr1_fp8_b200.sh",
        branches=(Branch(8, 1, _B200_FP8_SPACE_TP8, fp8_tp8_flags, cfg_ids=(87,), dated_ids=False),
                  Branch(4, 1, _TP4_8K, fp8_tp4_flags, cfg_ids=(271,))),
        not_simulated=_NOT_SIMULATED_FP8, server_tokenize_us_per_token=B200_TOKENIZE_US_PER_TOKEN,
        evidence="nvidia-master.yaml @12ba0ae07 (2026-03-25, image v0.5.9-cu130; launch lines unchanged until the "
                 "v0.5.11 image, 6d089f7ab, 2026-05-14)"),
    KnownDeployment(
        name="dsr1-fp8-b200-sglang-mtp", runner="b200", gpu="b200_sxm", precision="fp8", sglang_version="0.5.9",
        image="lmsysorg/sglang:v0.5.9-cu130", commit="12ba0ae07",
        script="benchmarks/single_node/dsr1_fp8_b200_mtp.sh",
        branches=(Branch(8, 1, {k: _doubling(4, 512) for k in ((1024, 1024), (1024, 8192), (8192, 1024))},
                         eagle_flags),),
        not_simulated=_NOT_SIMULATED_FP8 + _NOT_SIMULATED_MTP,
        server_tokenize_us_per_token=B200_TOKENIZE_US_PER_TOKEN,
        evidence="nvidia-master.yaml @12ba0ae07, spec-decoding: mtp (the accepted length is not recorded: "
                 "simcore.speculative's default)"),
    KnownDeployment(
        name="dsr1-fp4-b200-sglang", runner="b200", gpu="b200_sxm", precision="nvfp4", sglang_version="0.5.9",
        image="lmsysorg/sglang:v0.5.9-cu130", commit="12ba0ae07", script="benchmarks/single_node/dsr1_fp4_b200.sh",
        branches=(Branch(4, 4, {k: _doubling(4, 128) for k in ((1024, 1024), (1024, 8192), (8192, 1024))},
                         fp4_flags, cfg_ids=(202,)),
                  Branch(8, 8, {(1024, 1024): _doubling(4, 128), (1024, 8192): _doubling(4, 128),
                                (8192, 1024): _doubling(4, 16)}, fp4_flags, cfg_ids=(201,))),
        not_simulated=_NOT_SIMULATED_FP4, server_tokenize_us_per_token=B200_TOKENIZE_US_PER_TOKEN,
        evidence="nvidia-master.yaml @12ba0ae07, model nvidia/DeepSeek-R1-0528-FP4-V2"),
    KnownDeployment(
        name="dsr1-fp8-b300-sglang", runner="b300", gpu="b300_sxm", precision="fp8", sglang_version="0.5.10.post1",
        image="lmsysorg/sglang:v0.5.10.post1-cu130", commit="5b302f147",
        script="benchmarks/single_node/dsr1_fp8_b300.sh",
        branches=(Branch(8, 1, {(1024, 1024): _doubling(4, 64), (8192, 1024): (4,)}, fp8_tp8_flags, cfg_ids=(719,)),
                  Branch(4, 1, _TP4_8K, fp8_tp4_flags, cfg_ids=(720,))),
        not_simulated=_NOT_SIMULATED_FP8, server_tokens_per_prompt_token=B300_TOKEN_FACTOR,
        evidence="added @5b302f147 (2026-04-17, #1050, 'reuses the existing DSR1 FP8 B200 SGLang recipe as-is'); "
                 "image v0.5.10.post1-cu130 until 2026-05-16"),
    # The InferenceX records that no configuration of today's nvidia-master.yaml covers (module docstring, "Rows of the
    # shared file with no known deployment"): registered with their unknown parts assumed by a rule stated first.
    KnownDeployment(
        name="dsr1-tmpl-fp4-b200-sglang", runner="b200", gpu="b200_sxm", precision="nvfp4",
        sglang_version="0.5.3rc1", record_version="", image="lmsysorg/sglang:v0.5.3rc1-cu129-b200",
        commit="93fba3b8d", script="benchmarks/dsr1_fp4_b200_docker.sh",
        branches=(Branch(4, 1, {k: _doubling(4, 128) for k in ((1024, 1024), (1024, 8192), (8192, 1024))},
                         fp4_flags, cfg_ids=(88,), ep_run=4),
                  Branch(8, 1, {k: _doubling(4, 128) for k in ((1024, 1024), (1024, 8192), (8192, 1024))},
                         fp4_flags, cfg_ids=(99,), ep_run=8)),
        not_simulated=_NOT_SIMULATED_FP4.replace("flashinfer_trtllm", "(--enable-flashinfer-trtllm-moe)")
        + "; checkpoint nvidia/DeepSeek-R1-0528-FP4 (v1) priced as the nvfp4 model; no FlashInfer JIT cache "
          "(the first requests' compilation inside the measured window, docs/accuracy.md §3.15)",
        prompts_per_client=lambda osl: 20 if osl == 8192 else 50, warmups_per_client=0,
        server_tokenize_us_per_token=B200_TOKENIZE_US_PER_TOKEN,
        evidence=".github/workflows/dsr1-tmpl.yml bmk-b200-fp4 @93fba3b8d (2025-10-26; runner b200, tp-list [4,8], "
                 "conc-list [4..128]); --enable-ep-moe: ep_size = tp_size; client runners/launch_b200-nvd.sh "
                 "(kimbochen/bench_serving, no --num-warmups)",
        assumed=("the runner node, hence the prompt count: 50·C (20·C at OSL 8192) of the b200-nvd docker nodes, "
                 "the majority of the b200 pool's nodes able to run this job (runner-sweep-test.yml @93fba3b8d: "
                 "b200-nvd_0, b200-nvd_1 at 50·C, b200-tg_0 at 10·C; b200-nv_0/1 are slurm nodes with no "
                 "dsr1_fp4_b200_slurm.sh); the other choice, 10·C: docs/accuracy.md §3.15",)),
    KnownDeployment(
        name="dsr1-fp8-b200-sgl-ep8", runner="b200", gpu="b200_sxm", precision="fp8", sglang_version="0.5.5",
        record_version="", image="lmsysorg/sglang:v0.5.5-cu129-amd64", commit="97f253b51",
        script="benchmarks/dsr1_fp8_b200_docker.sh",
        branches=(Branch(8, 8, {k: _doubling(4, 64) for k in ((1024, 1024), (1024, 8192), (8192, 1024))},
                         fp8_tp8_flags, cfg_ids=(199,)),),
        not_simulated=_NOT_SIMULATED_FP8,
        prompts_per_client=lambda osl: 20 if osl == 8192 else 50, warmups_per_client=0,
        server_tokenize_us_per_token=B200_TOKENIZE_US_PER_TOKEN,
        evidence="nvidia-master.yaml dsr1-fp8-b200-sgl{,ang} with ep: 8 from d021eb362 (2025-10-27) to 189ae51cc "
                 "(2025-11-18); --ep-size $EP_SIZE in the script from d1d2c82b8 (2025-11-09), whose config and every "
                 "later one with ep 8 name image v0.5.5-cu129-amd64; runners.yaml b200 = b200-nvd_0..3 (docker, "
                 "runners/launch_b200-nvd.sh: 50·C prompts, 20·C at OSL 8192, no warm-up)",
        assumed=("ep 8 as the record labels it (the script ran EP8 from d1d2c82b8, 2025-11-09, EP1 under the same "
                 "label before); hence SGLang 0.5.5, the image of every config with ep 8 from then on",)),
    KnownDeployment(
        name="dsr1-fp8-b200-sglang-0.5.6", runner="b200", gpu="b200_sxm", precision="fp8", sglang_version="0.5.6",
        image="lmsysorg/sglang:v0.5.6-cu129-amd64", commit="d27433dff", script="benchmarks/dsr1_fp8_b200.sh",
        branches=(Branch(8, 1, {(8192, 1024): _doubling(4, 64)}, fp8_tp8_flags),),
        not_simulated=_NOT_SIMULATED_FP8,
        prompts_per_client=lambda osl: 20 if osl == 8192 else 50, warmups_per_client=0,
        server_tokenize_us_per_token=B200_TOKENIZE_US_PER_TOKEN,
        evidence="image v0.5.6-cu129-amd64 for 8192×1024 TP8 C 4..64 from d27433dff (2025-12-31) to 1d29967c4 "
                 "(2026-01-13); TP8 launch line as at 12ba0ae07; bench_serving without warm-up until d053ae24e",
        assumed=("the runner node, hence the prompt count: 50·C and no warm-up of the docker nodes "
                 "(runners/launch_b200-dgxc.sh, launch_b200-nvd.sh), the majority of the b200 pool's node-time in the "
                 "image's window (runners.yaml: 6 docker + 4 slurm nodes from ea181ae6d, 2025-12-31, to 3858fefd2, "
                 "2026-01-12; 2 + 4 for the last day); the slurm nodes' 10·C (dsr1_fp8_b200_slurm.sh): "
                 "docs/accuracy.md §3.15",)),
    KnownDeployment(
        name="dsr1-fp4-b300-sglang", runner="b300", gpu="b300_sxm", precision="nvfp4", sglang_version="0.5.10.post1",
        image="lmsysorg/sglang:v0.5.10.post1-cu130", commit="9ebeafb4e",
        script="benchmarks/single_node/dsr1_fp4_b300.sh",
        branches=(Branch(4, 4, {(1024, 1024): _doubling(4, 128), (8192, 1024): _doubling(4, 128)}, fp4_flags,
                         cfg_ids=(717,)),
                  Branch(8, 8, {(1024, 1024): _doubling(4, 128), (8192, 1024): _doubling(4, 16)}, fp4_flags,
                         cfg_ids=(718,))),
        not_simulated=_NOT_SIMULATED_FP4, server_tokens_per_prompt_token=B300_TOKEN_FACTOR,
        evidence="added @9ebeafb4e (2026-04-17, #1049)"),
)

_CFG_ID = re.compile(r"^dsr1_(?P<runner>b\d+)_sglang_(?P<prec>fp[48])_agg_(?P<isl>\d+)x(?P<osl>\d+)_c(?P<c>\d+)"
                     r"_cfg(?P<cfg>\d+)$")
_DATED_ID = re.compile(r"^\d{4}_\d{2}_\d{2}_deepseek_r1_(?P<runner>b\d+)_sxm_sglang_(?P<prec>fp[48])_agg_"
                       r"(?P<isl>\d+)x(?P<osl>\d+)_c(?P<c>\d+)_tp(?P<tp>\d+)(?:_0)?_ep(?P<ep>\d+)(?:_0)?_\d+$")
_PRECISION = {"fp8": "fp8", "fp4": "nvfp4"}


@dataclass(frozen=True)
class Match:
    """A record recognised as a run of ``deployment``: the tp/ep it ran at and whether the file's tp was tp × ep."""

    deployment: KnownDeployment
    branch: Branch
    tp: int
    ep: int
    relabelled: bool  # the file's tp column was tp × ep

    def columns(self, isl: int, osl: int, concurrency: int) -> dict[str, str]:
        """The validation-format columns of the run: flags, client, lengths' rule, tokenizer effects, note."""
        d = self.deployment
        return {
            "tp": str(self.tp), "ep": str(self.ep), "sglang_version": d.sglang_version,
            "server_args": self.branch.flags(concurrency, self.ep),
            "client": "bench_serving", "random_range_ratio": d.random_range_ratio, "seed": d.seed,
            "num_requests": str(d.prompts_per_client(osl) * concurrency),
            "warmup_requests": str(d.warmups_per_client * concurrency),
            "server_tokens_per_prompt_token": d.server_tokens_per_prompt_token.get(isl, ""),
            "server_tokenize_us_per_token": d.server_tokenize_us_per_token.get(isl, ""),
            "deployment_note": f"{d.name}; not simulated: {d.not_simulated}",
        }


def _ints(r: Mapping[str, str], *keys: str) -> tuple[int, ...] | None:
    try:
        return tuple(int(float(r.get(k) or "")) for k in keys)
    except ValueError:
        return None


def id_fields(record_id: str) -> dict[str, str] | None:
    """The fields an InferenceX record id carries (runner, precision, isl, osl, c, and cfg or tp/ep), or None."""
    m = _CFG_ID.match(record_id) or _DATED_ID.match(record_id)
    return None if m is None else {k: v for k, v in m.groupdict().items() if v is not None}


def candidates(record: Mapping[str, str]) -> list[Match]:
    """Every registered deployment whose rules (module docstring) the record satisfies, twins not considered."""
    f = id_fields((record.get("id") or "").strip())
    nums = _ints(record, "tp", "ep", "isl", "osl", "concurrency") if f else None
    if f is None or nums is None:
        return []
    tp, ep, isl, osl, c = nums
    prec = _PRECISION[f["prec"]]
    if ((record.get("precision") or "").strip() != prec or (int(f["isl"]), int(f["osl"]), int(f["c"])) != (isl, osl, c)
            or (record.get("gpu") or "").strip() != f"{f['runner']}_sxm"):
        return []
    if "tp" in f and (int(f["tp"]), int(f["ep"])) != (tp, ep):
        return []
    version = (record.get("sglang_version") or "").strip()
    out = []
    for d in DEPLOYMENTS:
        carried = d.sglang_version if d.record_version is None else d.record_version
        if (d.runner, d.precision, carried) != (f["runner"], prec, version):
            continue
        for b in d.branches:
            if "cfg" in f and int(f["cfg"]) not in b.cfg_ids:
                continue
            if not b.has(isl, osl, c) or b.ep != ep:
                continue
            run_ep = b.ep_run or ep
            if b.tp == tp:
                out.append(Match(d, b, tp, run_ep, relabelled=False))
            elif "cfg" in f and ep > 1 and tp == b.tp * ep:
                out.append(Match(d, b, b.tp, run_ep, relabelled=True))
    return out


def recognise(record: Mapping[str, str]) -> Match | None:
    """The deployment a single record measured, or None; see `as_deployed` for the twins of ``cfg`` rows."""
    found = candidates(record)
    own = [m for m in found if m.branch.dated_ids or "cfg" in (id_fields(record["id"]) or {})]
    return own[0] if len(own) == 1 else None


def same_run_key(record: Mapping[str, str], match: Match) -> tuple:
    """Two records with this key are one measurement filed twice (TTFT and TPOT equal to 1e-15 relative)."""
    return (record.get("gpu"), record.get("precision"), match.tp, match.ep, record.get("isl"), record.get("osl"),
            record.get("concurrency"), round(float(record.get("measured_ttft_ms") or "nan"), 6),
            round(float(record.get("measured_tpot_ms") or "nan"), 6))


def recognise_all(records: Iterable[Mapping[str, str]]) -> list[tuple[Match | None, int | None]]:
    """Per record: its `Match` (or None) and the index of the first record of the same run (None: it is the first).

    A dated record that is the same run as a ``cfg`` record of a branch taking dated ids only as twins
    (dsr1-fp8-b200-sglang's TP8 branch) is that branch's run; every copy of a run is simulated as its first copy in
    the file."""
    records = list(records)
    matches = [recognise(r) for r in records]
    cfg_keys = {(same_run_key(r, m), m.deployment.name, m.branch.tp) for r, m in zip(records, matches)
                if m is not None and "cfg" in (id_fields(r["id"]) or {})}
    for i, r in enumerate(records):
        for c in candidates(r):
            if not c.branch.dated_ids and (same_run_key(r, c), c.deployment.name, c.branch.tp) in cfg_keys:
                matches[i] = c
    firsts: dict[tuple, int] = {}
    out: list[tuple[Match | None, int | None]] = []
    for i, (r, m) in enumerate(zip(records, matches)):
        if m is None:
            out.append((None, None))
            continue
        j = firsts.setdefault(same_run_key(r, m), i)
        out.append((m, None if j == i else j))
    return out


def _flag_set(text: str) -> set[str] | None:
    """``--flag value`` / ``--flag=value`` / ``--switch`` items of a flag string (None: a stray word)."""
    items: list[str] = []
    for tok in text.split():
        if tok.startswith("--"):
            items.append(tok.replace("=", " ", 1))
        elif items and " " not in items[-1]:
            items[-1] += " " + tok
        else:
            return None
    return set(items)


def is_reconstruction(server_args: str | None, isl: int | None) -> bool:
    """Whether a row's ``server_args`` are absent or aiconfigurator's generated flags (``--enable-mixed-chunk``,
    ``--max-prefill-tokens isl+1500``, in any order): not a record of the measured server."""
    text = " ".join((server_args or "").split())
    if not text:
        return True
    if isl is None:
        return False
    flags = _flag_set(text)
    return flags is not None and any(flags == {f.format(mpt=isl + 1500) for f in cand} for cand in _RECONSTRUCTED)


def unknown_reason(record: Mapping[str, str]) -> str | None:
    """For an InferenceX record id that no registered deployment matches: the label its row carries."""
    return UNKNOWN_LABEL if id_fields((record.get("id") or "").strip()) is not None else None


UNKNOWN_LABEL = ("InferenceX record with no known deployment (its configuration, version or client is not "
                 "established, shadowsim/known_deployments.py, docs/accuracy.md §3.15): simulated with the file's "
                 "server_args")


ASSUMPTION_PREFIX = "published deployment: "
# the assumptions of a row whose deployment has parts no record establishes (`KnownDeployment.assumed`)
PARTLY_ASSUMED_PREFIX = "published deployment (partly assumed): "


def as_deployed(records: list[dict[str, str]], fieldnames: list[str]) -> tuple[list[dict[str, str]], list[str]]:
    """The records as their published deployments ran: every recognised record whose ``server_args`` are absent or
    aiconfigurator's reconstruction (`is_reconstruction`) gets its deployment's columns (`Match.columns`), copies of
    one run the first copy's model and columns, and ``published_deployment`` / ``deployment_assumption`` say so;
    unrecognised InferenceX records get the `unknown_reason` label. Returns (records, fieldnames)."""
    found = recognise_all(records)
    out: list[dict[str, str]] = []
    extra = ["client", "random_range_ratio", "seed", "warmup_requests", "server_tokens_per_prompt_token",
             "server_tokenize_us_per_token", "deployment_note", "published_deployment", "deployment_assumption"]
    fields = list(fieldnames) + [f for f in extra if f not in fieldnames]
    rewritten: dict[int, dict[str, str]] = {}
    for i, (r, (m, first)) in enumerate(zip(records, found)):
        r = dict(r)
        isl = _ints(r, "isl")
        if m is None or not is_reconstruction(r.get("server_args"), isl[0] if isl else None):
            if m is None and unknown_reason(r):
                r["deployment_assumption"] = unknown_reason(r) or ""
            out.append(r)
            continue
        base = rewritten.get(first) if first is not None else None
        if base is not None:  # the same run filed twice: simulated as the first copy
            for k in ("model", "tp", "ep", "sglang_version", "server_args", "client", "random_range_ratio", "seed", "num_requests",
                      "warmup_requests", "server_tokens_per_prompt_token", "server_tokenize_us_per_token",
                      "deployment_note", "published_deployment"):
                r[k] = base[k]
            first_prefix = (PARTLY_ASSUMED_PREFIX if base["deployment_assumption"].startswith(PARTLY_ASSUMED_PREFIX)
                            else ASSUMPTION_PREFIX)
            r["deployment_assumption"] = (f"{first_prefix}the same run as {base['id']} (equal TTFT and TPOT), "
                                          f"simulated as it: " + base["deployment_assumption"].removeprefix(
                                              first_prefix))
        else:
            c = int(float(r["concurrency"]))
            cols = m.columns(int(float(r["isl"])), int(float(r["osl"])), c)
            was = f"tp {r['tp']} → {m.tp} (the file's tp is tp × ep); " if m.relabelled else ""
            if m.branch.ep_run is not None:
                was += f"ep {r['ep']} → {m.ep} (--enable-ep-moe: SGLang sets ep_size = tp_size); "
            if m.deployment.record_version is not None and m.deployment.record_version != m.deployment.sglang_version:
                was += f"SGLang {m.deployment.sglang_version} (the file: {r.get('sglang_version') or 'blank'}); "
            assumed = m.deployment.assumed
            prefix = PARTLY_ASSUMED_PREFIX if assumed else ASSUMPTION_PREFIX
            assumed_text = "".join(f"ASSUMED: {a}; " for a in assumed)
            r.update(cols)
            r["published_deployment"] = m.deployment.label
            r["deployment_assumption"] = (
                f"{prefix}{m.deployment.label}: {assumed_text}{was}its launch flags and client (bench_serving, range "
                f"ratio {m.deployment.random_range_ratio}, {r['num_requests']} prompts, {r['warmup_requests']} "
                f"warm-up) instead of the file's reconstructed server_args; not simulated: "
                f"{m.deployment.not_simulated}")
        rewritten[i] = r
        out.append(r)
    return out, fields
