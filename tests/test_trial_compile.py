"""Issue 24, finding 13: the tuning trial compiles every candidate (each is a fresh model) but priced a candidate by
its steps alone, so a compiled plan's trial ran candidates its budget could not pay for. The plan's warm-up beyond
its steps (the compile) is now measured and added to each candidate's price. torch.compile is replaced by a
stand-in whose first call takes 3 s, as compiling does (a real compile costs minutes on this CPU)."""
from __future__ import annotations

import time

import pytest

from fasttrain.train.types import TrainArgs
from fasttrain.tuning import decide

COMPILE_S = 3.0


@pytest.fixture
def slow_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    import fasttrain.models.setup as ms

    def compile_taking_a_second(module, mode=None, dynamic=None):
        first = [True]

        def call(*args):
            if first[0]:
                first[0] = False
                time.sleep(COMPILE_S)
            return module(*args)
        return call

    monkeypatch.setattr(ms.torch, "compile", compile_taking_a_second)


def test_a_compiled_plans_trial_prices_the_compile_into_each_candidate(slow_compile: None,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from fasttrain.train.setup.prepare import prepare
    from fasttrain.train.trial.tune import run_trial
    # Under twice the compile: the plan (3 s compile and its steps) fits, the plan and a second compile never do
    monkeypatch.setitem(decide.HARD_CAP_S, "cpu", 5.9)
    prep = prepare(TrainArgs(profile="cpu", data="synthetic", model="tiny_cnn", image_size=16,
                             sets=["speed.compile=true", "loader.batch_size=8"], dry_run=True))
    assert prep.plan.compile
    _, found = run_trial(prep, prep.plan, epochs=100_000)  # a long run: the budget is the 5.9 s cap
    # compile_s = the warm-up's time less its steps at the timed median: under load the median step can be slower
    # than the warm-up's were, so a little of the 3 s is taken off (2.37 s seen in CI-like load); ~0 without it
    assert found["budget_s"] == 5.9 and found["compile_s"] >= 0.6 * COMPILE_S
    # before, the next candidate was priced at its steps (~0.3 s) and run: 3 s more, over the budget
    assert [c["candidate"] for c in found["candidates"]] == ["the plan"], found
    assert any("over the trial budget" in s for s in found["skipped"])


def test_the_price_of_a_candidate_includes_its_compile() -> None:
    assert decide.candidate_cost_s(0.1, 4, compile_s=30.0) == pytest.approx(decide.candidate_cost_s(0.1, 4) + 30.0)
