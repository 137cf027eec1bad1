"""Figure: a suite bench read back per task (JAXBench's table).

    python benchmarks/jaxbench.py --db BENCH.duckdb [--bench-json OUT.json] --json

`kernelgraph bench <JAXBench>/benchmark --policy auto --iterations 1 --jobs 2
--scale 0.125,0.0625 --db BENCH.duckdb --json > OUT.json` runs the suite; this reads its log
and prints, per task: the kernel class the planner chose (from the run's first plan), the
verdict of the winner's re-verification, its speedup over the XLA baseline (SIMULATED on a
sim-* target, `speedup_simulated`; a real target's is `speedup_measured`), and the reason of
any run without a verified kernel. With `--bench-json` (the bench's own `--json` output) the
tasks the bench skipped before any run, its summary line and its wall time come along:
`wall_s` from the start of the task checks to the last run's end, `check_s` the checks.

Where the time went, over every run: `phase_wall_s`, each phase's wall seconds summed (runs
overlap under --jobs, so the sum exceeds the bench's wall time; a sweep's includes the
configurations it tested), and `suite_runs`, the runs of the whole suite in interpret mode:
default configurations tested (`TestsRun`), other configurations tested by the tuner
(`ConfigMeasured`), winners re-verified (`WinnerVerified`), and `defaults_not_tested`, the
valid iterations kept at a tuned configuration whose default never ran. `outside_evaluator_s`:
per phase, the wall seconds its agent spent around the evaluator (the phase's wall less the
`total_s` in its verdict or receipt): mostly rebuilding a suite its process no longer held.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

# This folder holds scripts named like the project's packages (agents.py, tasks/): import
# the project's, not them.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from kernelgraph.cli.progress import first_line  # noqa: E402  (after the path is set)


def per_run(db: Path) -> dict[str, dict[str, Any]]:
    """Every run of the log, by run id."""
    from agents.llm.offline.author import plan_spec
    from eventstore.events import PlanProposed, RunFinished, RunRequested, WinnerVerified
    from eventstore.log import EventLog

    runs: dict[str, dict[str, Any]] = {}
    with EventLog(db, read_only=True) as log:
        for run in log.runs():
            events = list(log.events(run_id=run.run_id))
            requested = next((e for e in events if isinstance(e, RunRequested)), None)
            if requested is None:
                continue
            plan = next((e for e in events if isinstance(e, PlanProposed)), None)
            spec = plan_spec(log.get_artifact(plan.plan_sha256).decode()) if plan else {}
            verified = next((e for e in events if isinstance(e, WinnerVerified)), None)
            finished = next((e for e in events if isinstance(e, RunFinished)), None)
            passed = verified is not None and verified.verdict == "pass"
            speedup = verified.speedup if passed else None
            measured = verified.measured_on if verified else "simulated"
            reason = "" if passed else (
                "; ".join(verified.reasons) if verified and verified.reasons
                else finished.reason if finished else "the run did not finish")
            runs[run.run_id] = {
                "task": requested.task_name,
                "kernel_class": spec.get("kernel_class"),
                "verdict": verified.verdict if verified else "no kernel",
                f"speedup_{measured}": round(speedup, 4) if speedup else None,
                "reason": first_line(reason, 300),
            }
    return runs


SUITE_RUNS = {"TestsRun": "defaults_tested", "ConfigMeasured": "configurations_tested",
              "WinnerVerified": "winners_reverified"}


OWN_RECORD = {"CompileChecked": "verdict_sha256", "TestsRun": "verdict_sha256",
              "ConfigMeasured": "verdict_sha256", "WinnerVerified": "receipt_sha256"}
"""The phases whose event names the record of their own evaluator call."""


def work(db: Path) -> dict[str, Any]:
    """Each phase's wall seconds summed over the log's runs, and its runs of the suite."""
    from eventstore.events import IterationFinished, TestsRun
    from eventstore.log import EventLog

    walls: Counter[str] = Counter()
    runs: Counter[str] = Counter()
    outside: Counter[str] = Counter()
    with EventLog(db, read_only=True) as log:
        events = list(log.events())
        tested = {(e.run_id, e.code_sha256) for e in events if isinstance(e, TestsRun)}
        for event in events:
            wall = getattr(event, "wall_s", None)
            if wall:
                walls[event.type_name] += wall
            if event.type_name in SUITE_RUNS:
                runs[SUITE_RUNS[event.type_name]] += 1
            if (isinstance(event, IterationFinished) and event.valid
                    and event.cites_event_id is None
                    and (event.run_id, event.code_sha256) not in tested):
                runs["defaults_not_tested"] += 1
            record = getattr(event, OWN_RECORD.get(event.type_name, ""), None)
            if record and wall:
                timings = json.loads(log.get_artifact(record)).get("timings") or {}
                if "total_s" in timings:
                    outside[event.type_name] += max(0.0, wall - timings["total_s"])
    return {"phase_wall_s": {k: round(v, 1) for k, v in sorted(walls.items())},
            "suite_runs": dict(runs),
            "outside_evaluator_s": {k: round(v, 1) for k, v in sorted(outside.items())}}


def per_task(runs: dict[str, dict[str, Any]], bench: dict[str, Any] | None) -> dict[str, Any]:
    """The runs by task: named as the bench named them, with its reason (said in the user's
    terms) where it gave one; without the bench's output, by the task's own name."""
    tasks: dict[str, dict[str, Any]] = {}
    for run in (bench or {}).get("runs", []):
        row = dict(runs.get(run.get("run_id") or "", {"kernel_class": None,
                                                      "verdict": "no kernel"}))
        row.pop("task", None)
        if not run.get("verified"):
            row["reason"] = first_line(run.get("reason") or row.get("reason")
                                       or run.get("status", ""), 300)
        tasks[run["task"]] = row
    if bench is None:
        for row in runs.values():
            tasks[row["task"]] = {k: v for k, v in row.items() if k != "task"}
    return tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, required=True, help="the bench's log (--db)")
    parser.add_argument("--bench-json", type=Path, help="the bench's own --json output")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if not args.db.is_file():
        parser.error(f"no bench log at {args.db}")
    bench = json.loads(args.bench_json.read_text()) if args.bench_json else None
    tasks = per_task(per_run(args.db), bench)
    report: dict[str, Any] = {
        "tasks": tasks,
        "verdicts": dict(Counter(t["verdict"] for t in tasks.values())),
        "classes": dict(Counter(t["kernel_class"] or "none" for t in tasks.values())),
        **work(args.db),
    }
    if bench is not None:
        report.update(summary=bench.get("summary"), wall_s=bench.get("wall_s"),
                      check_s=bench.get("check_s"), skipped=bench.get("skipped"))
    if args.json:
        print(json.dumps(report, indent=1, sort_keys=True))
        return
    for name in sorted(tasks, key=lambda n: (len(n.split("_")[0]), n)):
        t = tasks[name]
        speed = t.get("speedup_simulated") or t.get("speedup_measured")
        print(f"{name:55} {t['kernel_class'] or '-':18} {t['verdict']:9} "
              f"{f'{speed:.2f}x' if speed else '-':>7} {t['reason']}")


if __name__ == "__main__":
    main()
