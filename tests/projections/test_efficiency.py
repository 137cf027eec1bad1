"""Search efficiency in the open: one definition (`projections.metrics`) that replay, the
report and bench all print, folded from a run's events; and progress lines that name the
lever rather than cutting the hint mid-word."""

from __future__ import annotations

from typing import Any

from agents.planner import plan_summary
from eventstore.events import (
    BaselineMeasured,
    Event,
    IterationFinished,
    NodeEvaluated,
    RunRequested,
    TestsRun,
    new_event_id,
)
from kernelgraph.bench import summarise
from kernelgraph.cli.progress import Progress, clip, lever_line
from projections.metrics import Metrics
from projections.replay import LogView

RUN = "run-eff"


def emit(cls: type[Event], node: str = "n1", **payload: Any) -> Any:
    return cls(event_id=new_event_id(), run_id=RUN, ts=1.0, producer="test@1", node_id=node,
               **payload)


def events() -> list[Event]:
    """Five candidates: A (1.0x), A again (cited), B (1.5x), C (priced, not tested), then a
    plan that failed; A was tested twice (the waste the figure counts). A plan that wrote no
    kernel (`no_gain`) is no candidate."""
    it1 = emit(IterationFinished, iteration=1, valid=True, compiled=True, code_sha256="A",
               speedup=1.0, latency_s=1.0)
    return [
        emit(RunRequested, "root", task_name="t", task_sha256="T", policy="greedy",
             target="sim-tpu-v6e", provider="offline"),
        emit(BaselineMeasured, "root", latency_s=1.0, measured_on="simulated", target="sim-tpu-v6e"),
        emit(TestsRun, code_sha256="A", suite_sha256="S", passed=True, n_cases=3),
        it1,
        emit(TestsRun, code_sha256="A", suite_sha256="S", passed=True, n_cases=3),
        emit(IterationFinished, iteration=2, valid=True, compiled=True, code_sha256="A",
             speedup=1.0, latency_s=1.0, cites_event_id=it1.event_id),
        emit(TestsRun, "n2", code_sha256="B", suite_sha256="S", passed=True, n_cases=3),
        emit(TestsRun, "n2", code_sha256="X", suite_sha256="", passed=False, n_cases=0),
        emit(IterationFinished, "n2", iteration=1, valid=True, compiled=True, code_sha256="B",
             speedup=1.5, latency_s=1 / 1.5),
        emit(IterationFinished, "n2", iteration=2, valid=False, compiled=True, code_sha256="C",
             failed_phase="price", cites_event_id="check", estimate_speedup=1.2),
        emit(IterationFinished, "n2", iteration=3, valid=False, compiled=False,
             failed_phase="plan"),
        emit(IterationFinished, "n3", iteration=1, valid=False, compiled=False, no_gain=True,
             error="the planner concluded that no kernel will pay off"),
        emit(NodeEvaluated, valid=True, compiled=True, speedup=1.0, latency_s=1.0),
        emit(NodeEvaluated, "n2", valid=True, compiled=True, speedup=1.5, latency_s=1 / 1.5),
    ]


EXPECTED = {"candidates": 5, "judged": 3, "distinct_kernels": 3, "distinct_per_candidate": 0.6,
            "tested_twice": 1, "mean_candidates_to_best": 3.0, "best_over_first": 1.5,
            "climbed": 1}


def test_the_efficiency_figures_are_folded_from_the_log() -> None:
    figures = Metrics(RUN).apply_all(events()).summary()["by_policy"]["greedy"]["simulated"]
    assert figures["efficiency"] == EXPECTED
    run = Metrics(RUN).apply_all(events()).state.runs[RUN].efficiency.figures()
    assert run == {"candidates": 5, "judged": 3, "distinct_kernels": 3, "tested_twice": 1,
                   "candidates_to_best": 3, "best_over_first": 1.5}


def test_replay_and_bench_print_the_same_figures() -> None:
    view = LogView().apply_records(enumerate(events()))
    replayed = view.to_json()["metrics"]["by_policy"]["greedy"]["simulated"]["efficiency"]
    benched = summarise({RUN: events()})["greedy"]["efficiency"]
    assert replayed == benched == EXPECTED
    assert summarise({RUN: events()})["greedy"]["mean_candidates_to_best"] == 3.0


def test_progress_names_the_lever_and_cuts_the_hint_at_a_word() -> None:
    hint = ("[lever=block_shape+grid_order class=matmul]  Resize the blocks so that each grid "
            "step moves enough bytes to hide the per-step overhead, and reorder the grid axes "
            "so the operand that is reused stays resident")
    line = lever_line(hint)
    assert line.startswith("lever block_shape+grid_order: Resize the blocks")
    assert line.endswith(" ...") and "  " not in line
    assert line.removesuffix(" ...") in "lever block_shape+grid_order: " + " ".join(
        hint.split("]", 1)[1].split())
    assert lever_line("make it faster") == "hint: make it faster"
    progress = Progress(quiet=True)
    progress.describe(emit(RunRequested, "root", task_name="t", task_sha256="T",
                           policy="greedy", target="sim-tpu-v6e", provider="offline"))
    from eventstore.events import ExpansionRequested

    described = progress.describe(emit(ExpansionRequested, parent_id="root", policy="greedy",
                                       strategy=hint, iterations=2))
    assert described is not None and "(2 it, lever block_shape+grid_order: Resize" in described
    done = progress.describe(emit(IterationFinished, "n2", iteration=2, valid=False,
                                  compiled=True, code_sha256="C", failed_phase="price",
                                  cites_event_id="x", estimate_speedup=1.2))
    assert done is not None and "not faster (1.20x priced), not tested" in done


def test_every_free_text_a_progress_line_shows_is_cut_at_a_word() -> None:
    """A plan's summary, a stop reason, a fix's error, a profile's next lever: cut mid-word,
    "this run already wrote" read "this ru"."""
    from eventstore.events import FixAttempted, PlanProposed, ProfileCaptured, SearchStopped

    words = ("Stop, writing no candidate: every block move it has here gives a kernel this run "
             "already wrote (blocks {'block_rows': 512}) and nothing else is left to try ") * 3
    progress = Progress(quiet=True)
    lines = [
        progress.describe(emit(PlanProposed, iteration=2, plan_sha256="P",
                               summary=plan_summary(f"## Strategy\n{words}\n"))),
        progress.describe(emit(SearchStopped, policy="greedy", reason=words)),
        progress.describe(emit(FixAttempted, iteration=1, attempt=1, code_sha256="C", error=words)),
        progress.describe(emit(ProfileCaptured, iteration=1, code_sha256="C", profile_sha256="F",
                               latency_s=1.0, measured_on="simulated", bound="memory",
                               top_lever=words)),
    ]
    flat = " ".join(words.split())
    for line in lines:
        assert line is not None and line.endswith(" ..."), line
        shown = line.removesuffix(" ...")
        text = shown[shown.index(flat[:20]):]
        assert flat.startswith(text) and flat[len(text)] == " ", line  # whole words only
    assert clip("x" * 300, 100) == "x" * 100 + " ..."  # one long word: cut inside, not lost
    assert clip("  short   text ", 100) == "short text"


def test_a_node_that_wrote_or_tested_no_kernel_is_not_reported_as_a_failed_one() -> None:
    from eventstore.events import ExpansionRequested

    progress = Progress(quiet=True)
    progress.describe(emit(RunRequested, "root", task_name="t", task_sha256="T", policy="beam",
                           target="sim-tpu-v6e", provider="offline"))
    for node in ("n1", "n2", "n3", "n4"):
        progress.describe(emit(ExpansionRequested, node, parent_id="root", policy="beam",
                               strategy="", iterations=2))
    for node, phase in (("n3", "price"), ("n3", "price"), ("n4", "price"), ("n4", "test")):
        progress.describe(emit(IterationFinished, node, iteration=1, valid=False, compiled=True,
                               code_sha256="C", failed_phase=phase))
    failed = emit(NodeEvaluated, "n1", valid=False, compiled=True, iterations=2, no_gain_plans=1)
    stopped = emit(NodeEvaluated, "n2", valid=False, compiled=False, iterations=1, no_gain_plans=1)
    priced = emit(NodeEvaluated, "n3", valid=False, compiled=True, iterations=2)
    partly = emit(NodeEvaluated, "n4", valid=False, compiled=True, iterations=2)
    assert progress.describe(failed) == "n1 evaluated: no valid kernel"
    assert progress.describe(stopped) == (
        "n2 evaluated: no kernel written (its planner found nothing new to try)")
    assert progress.describe(priced) == (
        "n3 evaluated: no kernel tested (each priced no faster than its parent)")
    assert progress.describe(partly) == "n4 evaluated: no valid kernel"


def test_the_replay_and_report_commands_show_the_efficiency(tmp_path) -> None:
    import json

    from typer.testing import CliRunner

    from eventstore.log import EventLog
    from kernelgraph.cli import app, load_commands

    db = tmp_path / "eff.duckdb"
    with EventLog(db) as log:
        log.append(events())
    load_commands()
    runner = CliRunner()
    replayed = runner.invoke(app, ["replay", str(db), "--json"])
    assert replayed.exit_code == 0, replayed.output
    by_policy = json.loads(replayed.stdout)["metrics"]["by_policy"]
    assert by_policy["greedy"]["simulated"]["efficiency"] == EXPECTED
    shown = runner.invoke(app, ["replay", str(db)])
    assert shown.exit_code == 0 and "search efficiency per policy" in shown.output
    out = tmp_path / "report"
    reported = runner.invoke(app, ["report", str(db), "--out", str(out)])
    assert reported.exit_code == 0, reported.output
    html = (out / "index.html").read_text()
    assert "distinct kernels" in html and "tested twice" in html and "best / first" in html
    assert "<td>0.60</td>" in html
