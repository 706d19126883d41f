"""The routing-hypothesis test of docs/accuracy.md §3.12 (validation/moe_routing_test.py) and the ``moe_routing``
switch of `simulate_row`: the tables' two routing distributions (aiconfigurator ``collect_moe.py``), hand-derived."""
from __future__ import annotations

import dataclasses

import numpy as np

from shadowsim.commands.validate import read_rows
from simcore.perf.validation import simulate_row


def test_the_balanced_generator_by_hand(validation_builder) -> None:
    mod = validation_builder("moe_routing_test")
    # T >= 32 (= ceil(256 / 8)): token t's i-th expert is (t + 32 i) mod 256, so 32 tokens hit all 256 experts once
    # and rank 0 of EP4 (experts 0..63) gets 64 routes on 64 experts
    r = mod.balanced_rank0(32, 4)
    assert (r > 0).sum() == 64 and r.sum() == 64
    # T = 4 < 32: int(t · 32 / 4 + 32 i) mod 256 = 8 t + 32 i: on experts 0..63 the i = 0, 1 rows: 8 experts
    r = mod.balanced_rank0(4, 4)
    assert sorted(np.flatnonzero(r).tolist()) == [0, 8, 16, 24, 32, 40, 48, 56] and r.sum() == 8


def test_the_power_law_generator_keeps_its_totals_and_measures_the_busiest_rank(validation_builder) -> None:
    mod = validation_builder("moe_routing_test")
    rng = np.random.default_rng(0)
    for tokens, ep in ((32, 4), (64, 8), (128, 4)):
        rank = mod.power_law_busiest_rank(tokens, ep, rng)
        assert rank.shape == (256 // ep,)
        # the busiest of ep ranks holds at least its share of the tokens × top-k routes, at most all of them
        assert tokens * 8 / ep <= rank.sum() <= tokens * 8
    # nvfp4 expert bytes of one decode step: 40.1 experts × 3 × 7168 × 2048 × 4.5 bits × 58 layers = 57.6 GB
    # (the uniform-routing bound of docs/accuracy.md §3.12 at 32 tokens on an EP4 rank)
    assert abs(mod.expert_bytes_per_step(40.1) / 1e9 - 57.6) < 0.1


def test_balanced_routing_prices_an_ep_row_higher_and_leaves_an_ep1_row_alone(repo_dir) -> None:
    rows = {r.id: r for r in read_rows(repo_dir / "validation" / "sglang_deepseek_inferencex.csv")}
    ep = next(r for r in rows.values() if r.gpu == "b300_sxm" and r.ep == 4 and r.isl == 1024 and r.concurrency == 32)
    ep = dataclasses.replace(ep, osl=32, num_requests=32)
    pl, bal = simulate_row(ep), simulate_row(ep, moe_routing="balanced")
    # the B300 nvfp4 EP4 table at 32 tokens: balanced 0.2499 ms a layer, power law 0.1496 (× 58 layers: +5.8 ms)
    assert bal.predicted["tpot"] - pl.predicted["tpot"] > 4.0
    ep1 = next(r for r in rows.values() if r.gpu == "b300_sxm" and r.ep == 1 and r.tp == 8 and r.isl == 1024
               and r.concurrency == 4)
    ep1 = dataclasses.replace(ep1, osl=32, num_requests=8)
    assert simulate_row(ep1).predicted == simulate_row(ep1, moe_routing="balanced").predicted
