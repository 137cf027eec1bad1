"""`kernelgraph bench`'s parts: finding tasks in files and folders, and the per-policy figures
folded from real search logs (agents that answer at once, see `instant_search`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from instant_search import search

from eventstore.events import RunFinished
from kernelgraph.bench import (
    BenchPlan,
    BenchTask,
    RunOutcome,
    agent_concurrency,
    candidates_to_best,
    check_order,
    check_tasks,
    find_tasks,
    first_line,
    suite_summary,
    summarise,
)
from kernelgraph.client import KernelRequest
from projections.metrics import geomean_floored

ROOT = Path(__file__).resolve().parents[2]


def test_tasks_are_found_in_files_task_folders_and_jaxbench_folders(tmp_path: Path) -> None:
    jaxbench = tmp_path / "benchmark"
    for name in ("1_gemm", "2_norm"):
        (jaxbench / name).mkdir(parents=True)
        (jaxbench / name / "baseline.py").write_text("def workload(x):\n    return x\n")
    (jaxbench / "README.md").write_text("not a task")
    notes = tmp_path / "notes.py"
    notes.write_text("X = 1\n")
    tasks, skipped = find_tasks([ROOT / "tasks" / "gelu.py", jaxbench, notes, tmp_path / "nope"])
    assert [t.name for t in tasks] == ["gelu", "1_gemm", "2_norm"]
    reasons = {s.path.name: s.reason for s in skipped}
    assert reasons == {"notes.py": "not a task file (no reference function)",
                       "nope": "no such file or directory"}
    shipped, _ = find_tasks([ROOT / "tasks"])
    assert {"gelu", "rmsnorm", "matmul"} <= {t.name for t in shipped}


def test_the_checks_take_the_longest_task_file_first(tmp_path: Path) -> None:
    """With several check processes, the last check to start should be a short one: the
    longest file goes first, ties keep their order, and a missing file goes last (its check
    says why it cannot run)."""
    sizes = {"short": 10, "long": 300, "mid": 100, "mid_too": 100}
    tasks = []
    for name, size in sizes.items():
        (tmp_path / f"{name}.py").write_text("#" * size)
        tasks.append(BenchTask(tmp_path / f"{name}.py", name))
    tasks.append(BenchTask(tmp_path / "gone.py", "gone"))
    assert [tasks[i].name for i in check_order(tasks)] == ["long", "mid", "mid_too", "short",
                                                          "gone"]


@pytest.mark.parametrize("jobs", [1, 2])
def test_the_largest_tuning_point_runs_first_and_a_broken_task_is_dropped(
        tmp_path: Path, jobs: int) -> None:
    """Runs start in the order of their tuning point's input bytes, largest first, so a bench
    of many runs does not end on a long one started last; with two jobs the tasks are checked
    in two processes, with the same outcome."""
    broken = tmp_path / "broken.py"
    broken.write_text("def reference(x):\n    return x\n\ndef make_inputs(key, shape_index=0):\n"
                      "    raise RuntimeError('no inputs')\n")
    names = ("gelu", "matmul", "rmsnorm")
    plan = BenchPlan(tasks=[BenchTask(ROOT / "tasks" / f"{n}.py", n) for n in names]
                     + [BenchTask(broken, "broken")], policies=["auto"], jobs=jobs,
                     request=KernelRequest(task=ROOT / "tasks" / "gelu.py"))
    skipped = check_tasks(plan)
    # tuning points: matmul 2048x8192 + 8192x2048 f32 (128 MiB), gelu 1024x1024 (4 MiB),
    # rmsnorm 2048x512 + 512 (4 MiB + 2 KiB)
    assert [t.name for t in plan.tasks] == ["matmul", "rmsnorm", "gelu"]
    assert [s.path for s in skipped] == [broken] and "no inputs" in skipped[0].reason


async def test_per_policy_figures_come_from_the_runs_logs(tmp_path: Path) -> None:
    by_run = {}
    for policy in ("parallel", "greedy"):
        events = await search(tmp_path / policy, policy=policy, max_nodes=3, seed=1)
        by_run[events[0].run_id] = events
    figures = summarise(by_run)
    assert set(figures) == {"parallel", "greedy"}
    for policy, row in figures.items():
        (events,) = [e for e in by_run.values() if e[0].policy == policy]
        kernels = [e for e in events if e.type_name == "IterationFinished"]
        finished = next(e for e in events if e.type_name == "RunFinished")
        assert row["runs"] == 1 and row["candidates"] == len(kernels) == 3
        assert row["compile_rate"] == row["correctness_rate"] == 1.0
        assert row["geomean_speedup_floored"] == pytest.approx(geomean_floored([finished.speedup]), abs=1e-4)
        assert row["fast_p"]["0"] == 1.0 and row["measured_on"] == ["simulated"]
        assert row["mean_candidates_to_best"] == candidates_to_best(events)
    outcomes = [RunOutcome("gelu", e[0].policy, 1, run_id, "completed", verified=True)
                for run_id, e in by_run.items()]
    assert suite_summary(2, outcomes, by_run) == {"found": 2, "loaded": 1, "froze_suite": 1,
                                                  "verified": 1, "vacuous": []}
    # a task whose reference is constant is named apart (the test synthesiser's reason)
    constant = RunOutcome("const", "parallel", 1, "r-const", "failed",
                          "test_synth: VacuousSuite: const.py: reference output 0 is constant")
    line = suite_summary(3, [*outcomes, constant], by_run)
    assert line["vacuous"] == ["const"] and line["loaded"] == 2 and line["verified"] == 1
    # where the outcome's reason is in the user's terms (no error names), the run's log says it
    finished = RunFinished.create(run_id="r-zero", producer="auto@1", status="failed",
                                  reason="preparation failed: VacuousSuite: zero.py: "
                                         "reference output 0 is all zero in shape0-seed0")
    zero = RunOutcome("zero", "auto", 1, "r-zero", "failed",
                      "preparation failed: zero.py: reference output 0 is all zero in shape0-seed0")
    line = suite_summary(4, [*outcomes, constant, zero], {**by_run, "r-zero": [finished]})
    assert line["vacuous"] == ["const", "zero"]


@pytest.mark.parametrize(("target", "jobs", "want"), [
    ("sim-tpu-v6e", 2, {"executor": 2, "verifier": 2}),
    ("sim-tpu-v6e", 4, {"executor": 4, "verifier": 4}),
    ("sim-tpu-v6e", 1, {"executor": 2, "verifier": 1}),
    ("tpu", 2, {"executor": 2, "verifier": 1}),
])
def test_a_simulated_bench_verifies_as_many_winners_at_once_as_it_runs_jobs(
        target: str, jobs: int, want: dict[str, int]) -> None:
    """On a real device the winners' timings must not overlap; on a simulated target a run's
    final check must not wait for another run's."""
    plan = BenchPlan(tasks=[], policies=["auto"], jobs=jobs,
                     request=KernelRequest(task=ROOT / "tasks" / "gelu.py", target=target))
    assert agent_concurrency(plan) == want


def test_a_refusal_keeps_its_last_words() -> None:
    """The end of a refusal says what to do (JAXBench 7p's: the --scale that fits, past the
    300th character); one too long for a line is shortened at a word, never mid-word."""
    refusal = ("TaskError: " + "the tuning point does not hold: index can't contain negative "
               "values; " * 5 + "the smallest factor that keeps it is 0.84375 (--scale 0.84375)")
    assert len(refusal) > 300 and first_line(ValueError(refusal + "\nTraceback ...")) == refusal
    long = first_line(ValueError("word " * 400))
    assert len(long) <= 1000 and long.endswith("word ...")
