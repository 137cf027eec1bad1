"""`agents.judging`: the order of an iteration's test and sweep, on answers written by hand.

The steps answer from a script instead of the bus (`Scripted.call`); every command is still
built as `agents.auto` builds it, so the ids, kinds and fields checked are the real ones. The
real runs (`test_auto`, `test_judged_once`) check the same order end to end.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agents.calls import step_id
from agents.commands import ExpandNode, StartRun, TuneKernel
from agents.judging import JudgeSteps, Judgment, Rejection
from agents.steps import StepOrigin, step_command
from eventstore.events import CompileChecked, Event, TestsRun, TuningSwept, new_event_id

SIM, REAL = "sim-tpu-v6e", "tpu"


def emit(cls: type[Event], **payload: Any) -> Any:
    return cls(event_id=new_event_id(), run_id="r", ts=1.0, producer="t@1", node_id="n1",
               **payload)


def checked(**fields: Any) -> CompileChecked:
    return emit(CompileChecked, iteration=1, code_sha256="A", ok=True, **{
        "estimate_s": 2e-6, "estimate_speedup": 1.5, "program_sha256": "p" * 64,
        "verdict_sha256": "v" * 64, **fields})


def swept(best_s: float | None) -> TuningSwept:
    return emit(TuningSwept, iteration=1, code_sha256="A", configs_tried=int(best_s is not None),
                best_config={"block_rows": 128} if best_s else {}, best_latency_s=best_s,
                best_speedup=3e-6 / best_s if best_s else None,
                verdict_sha256="t" * 64 if best_s else None)


def ran_tests(passed: bool = True, latency_s: float = 2e-6) -> TestsRun:
    return emit(TestsRun, iteration=1, code_sha256="A", suite_sha256="s", passed=passed,
                n_cases=3, latency_s=latency_s, speedup=3e-6 / latency_s,
                verdict_sha256="d" * 64, config={"block_rows": 64}, measured_on="simulated",
                reasons=[] if passed else ["case seed0: wrong answer"])


class _History:
    def __init__(self, answered: dict[str, Event]) -> None:
        self.answered = answered

    def caused_by(self, command_id: str) -> list[Event]:
        return [self.answered[command_id]] if command_id in self.answered else []


class Scripted(JudgeSteps):
    """`JudgeSteps` whose commands are answered from `answers` by step name."""

    def __init__(self, target: str, answers: dict[str, Event], *,
                 answered_before: tuple[str, ...] = (), parent: dict[str, Any] | None = None,
                 ) -> None:
        common = {"run_id": "r", "task_sha256": "0" * 64, "task_file": "t.py", "task_name": "t",
                  "target_name": target, "provider": "offline", "tune_budget": 4}
        self.cmd = (StartRun.create(**common) if parent is None else
                    ExpandNode.create(**common, parent_id="n0", parent=parent, recipe_sha256=""))
        self.answers = answers
        self.history = _History({step_id(self.cmd, f"it1/{s}"): answers[s]
                                 for s in answered_before})
        self.sent: list[tuple[str, Any]] = []

    def command(self, cls: type[Any], key: str, iteration: int = 0, **fields: Any) -> Any:
        return step_command(StepOrigin.of(self.cmd), cls, step_id(self.cmd, key),
                            node_id="n1", task_sha256="0" * 64, iteration=iteration,
                            recipe_sha256="", **fields)

    async def call(self, command: Any, done: type[Any]) -> Any:
        step = next(s for s in self.answers if step_id(self.cmd, f"it1/{s}") == command.command_id)
        self.sent.append((step, command))
        answer = self.answers[step]
        assert isinstance(answer, done)
        return answer

    def judge_now(self, check: CompileChecked) -> Judgment | Rejection:
        return asyncio.run(self.judge(1, "A", check))

    @property
    def steps(self) -> list[str]:
        return [step for step, _ in self.sent]


def test_on_a_simulated_target_a_configuration_priced_faster_that_passes_spares_the_default() -> None:
    run = Scripted(SIM, {"tune-priced": swept(1e-6), "test": ran_tests()})
    judgment = run.judge_now(checked())
    assert run.steps == ["tune-priced"]  # the default never ran in interpret mode
    assert isinstance(judgment, Judgment) and judgment.config == {"block_rows": 128}
    assert judgment.proof_event_id == run.answers["tune-priced"].event_id
    (_, sweep), = run.sent
    assert isinstance(sweep, TuneKernel) and sweep.verdict_sha256 == "v" * 64  # narrowed
    assert (sweep.default_latency_s, sweep.default_program_sha256) == (2e-6, "p" * 64)
    assert sweep.beat_latency_s is None and sweep.budget == 4
    assert sweep.tested_at_most == 1  # a failure there is followed by the default's test


def test_when_no_other_configuration_passes_the_default_is_tested_and_not_swept_again() -> None:
    run = Scripted(SIM, {"tune-priced": swept(None), "test": ran_tests(), "tune": swept(1e-6)})
    judgment = run.judge_now(checked())
    assert run.steps == ["tune-priced", "test"]
    assert isinstance(judgment, Judgment) and judgment.config == {"block_rows": 64}
    assert judgment.proof_event_id == run.answers["test"].event_id
    # a wrong default is a test failure, after its sweep
    run = Scripted(SIM, {"tune-priced": swept(None), "test": ran_tests(passed=False)})
    rejected = run.judge_now(checked())
    assert isinstance(rejected, Rejection) and rejected.phase == "test"
    assert "wrong answer" in rejected.error and run.steps == ["tune-priced", "test"]
    # a configuration that passed but was not priced under the default's check (its mean over
    # the seed cases) is compared with the default, and kept when the default is wrong
    for default, kept in ((ran_tests(latency_s=2e-6), {"block_rows": 64}),
                          (ran_tests(passed=False), {"block_rows": 128})):
        run = Scripted(SIM, {"tune-priced": swept(2.5e-6), "test": default})
        judgment = run.judge_now(checked())
        assert run.steps == ["tune-priced", "test"]
        assert isinstance(judgment, Judgment) and judgment.config == kept


def test_a_real_target_an_unpriced_check_and_an_old_restart_test_first() -> None:
    answers = {"tune-priced": swept(1e-6), "test": ran_tests(), "tune": swept(1e-6)}
    for run, check in ((Scripted(REAL, answers), checked()),
                       (Scripted(SIM, answers), checked(estimate_s=None, program_sha256=None)),
                       (Scripted(SIM, answers, answered_before=("test",)), checked())):
        judgment = run.judge_now(check)
        assert run.steps == ["test", "tune"], run.steps
        (_, sweep) = run.sent[1]
        assert sweep.verdict_sha256 == "d" * 64  # the test run's verdict narrows it
        assert isinstance(judgment, Judgment) and judgment.config == {"block_rows": 128}
    # a restart after a sweep that came first keeps sweeping first
    run = Scripted(SIM, answers, answered_before=("tune-priced", "test"))
    run.judge_now(checked())
    assert run.steps == ["tune-priced"]


def test_a_default_priced_too_slow_for_its_parent_is_rescued_only_under_the_parent() -> None:
    parent = {"speedup": 2.0}  # the default is priced at 1.5x
    run = Scripted(SIM, {"tune-priced": swept(1e-6), "test": ran_tests()}, parent=parent)
    judgment = run.judge_now(checked())
    assert run.steps == ["tune-priced"] and isinstance(judgment, Judgment)
    (_, sweep), = run.sent
    assert sweep.beat_latency_s is not None and sweep.verdict_sha256 == ""  # the whole grid
    assert sweep.tested_at_most is None  # nothing follows it: the tuner's own number
    run = Scripted(SIM, {"tune-priced": swept(None)}, parent=parent)
    rejected = run.judge_now(checked())
    assert isinstance(rejected, Rejection) and rejected.phase == "price"
    assert "not faster" in rejected.error and rejected.fields["estimate_speedup"] == 1.5
    assert run.steps == ["tune-priced"]  # never tested
