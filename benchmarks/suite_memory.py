"""Figures: peak memory and time to freeze a suite, per task, at production sizes.

For each task (JAXBench ``<dir>/<task>/baseline.py`` under the directory given, and the
shipped tasks with ``--shipped``) a child process per task does what a run does before its
first candidate: load the task, freeze the suite, price the XLA baseline (simulated,
sim-tpu-v6e). The parent records the child's peak RSS (``ru_maxrss`` from ``wait4``), kills
it above ``--rss-limit-gb`` (with ``--limit-data`` that is also the child's RLIMIT_DATA, a
limit the evaluator reads before it builds anything) or after ``--timeout`` seconds, and
reports per task:

* ``status``: ``frozen``, ``refused`` (a TaskError or SuiteError, with its reason: a suite
  too large for this machine says so with its estimate and the --scale that would fit),
  ``killed`` (RSS limit), ``timeout`` or ``error``;
* ``load_s``, ``freeze_s``, ``baseline_s`` and ``to_first_candidate_s`` (their sum: what a
  run waits for before its first candidate is written);
* ``peak_rss_bytes`` and, for the current code, the footprint estimate it was checked with.

``--before REV`` also runs every task with the evaluator as it was at git revision REV
(exported with ``git archive``), for a before/after comparison on the same machine.
``--scale`` loads JAXBench tasks at those factors (the same option as `kernelgraph verify`).
``--plan-only`` stops after loading: the status is ``fits`` or ``refused`` by the footprint
estimate against the memory the child may use (what a run checks before it builds
anything), so every task's full-size verdict costs seconds, not the suite's arithmetic.
Prints one JSON object with --json, else a table.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
_GIB = float(1 << 30)

# Runs in the child, with the code under test first on sys.path. Old and new evaluators
# share these names; what only the new one has is looked up, not assumed.
_CHILD = r"""
import json, resource, sys, time
task_path, scales_text, data_limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
plan_only = sys.argv[4] == "1"
if data_limit:  # the limit is the process's own, as a deployment's memory limit would be
    resource.setrlimit(resource.RLIMIT_DATA, (data_limit, data_limit))
out = {"status": "error"}
started = time.perf_counter()
try:
    import jax  # noqa: F401 - imported before the clock, as in a running service
    from tools.inputs.tasks import load_task
    from tools.correctness.testsuite import build_suite
    t0 = time.perf_counter()
    scales = [float(s) for s in scales_text.split(",")] if scales_text else None
    task = load_task(task_path, scales=scales) if scales else load_task(task_path)
    out["load_s"] = time.perf_counter() - t0
    out["shapes"] = [repr(s) for s in task.shapes]
    out["notes"] = list(getattr(task, "notes", ()))
    try:
        from tools.correctness.footprint import suite_footprint
        counts = {0: 5, **{i: 1 for i in task.unseen_shape_indices}}
        out["estimate_bytes"] = suite_footprint(task, counts, held_per_case=False).peak_bytes
    except ImportError:
        pass
    out["rss_before_freeze_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if plan_only:
        from tools.correctness.footprint import fit_problem
        _, problem = fit_problem(task, counts, held_per_case=False)
        out["status"], out["reason"] = ("refused", problem) if problem else ("fits", "")
        out["child_wall_s"] = time.perf_counter() - started
        print("SUITE_MEMORY " + json.dumps(out), flush=True)
        sys.exit(0)
    t0 = time.perf_counter()
    suite = build_suite(task)
    out["freeze_s"] = time.perf_counter() - t0
    out["cases"] = len(suite.cases)
    out["suite_sha256"] = suite.sha256
    t0 = time.perf_counter()
    from tools.api import measure_baseline
    out["baseline_latency_s"] = measure_baseline(task).latency_s
    out["baseline_s"] = time.perf_counter() - t0
    out["to_first_candidate_s"] = out["load_s"] + out["freeze_s"] + out["baseline_s"]
    out["status"] = "frozen"
except Exception as exc:
    kind = type(exc).__name__
    refused = kind in ("TaskError", "SuiteError", "SuiteTooLarge")
    out["status"] = "refused" if refused else "error"
    out["reason"] = f"{kind}: {exc}"[:600]
out["child_wall_s"] = time.perf_counter() - started
print("SUITE_MEMORY " + json.dumps(out), flush=True)
"""


def run_child(code_root: Path, task: Path, scales: str, timeout_s: float,
              rss_limit: int, limit_data: bool = False, plan_only: bool = False
              ) -> dict[str, Any]:
    """One task in a fresh process; its peak RSS from wait4, killed past the limits (with
    ``limit_data`` the RSS limit is also the child's RLIMIT_DATA, which it can see)."""
    env = {**os.environ, "PYTHONPATH": str(code_root), "JAX_PLATFORMS": "cpu"}
    with tempfile.TemporaryFile() as stdout:
        proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(task), scales,
                                 str(rss_limit if limit_data else 0),
                                 "1" if plan_only else "0"],
                                cwd=code_root, env=env, stdout=stdout,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        started, verdict, status, usage = time.monotonic(), None, 0, None
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - started > timeout_s:
                verdict = f"timeout after {timeout_s:.0f} s"
            elif _rss(proc.pid) > rss_limit:
                verdict = f"killed: RSS above {rss_limit / _GIB:.1f} GiB"
            if verdict:
                os.killpg(proc.pid, signal.SIGKILL)
                _, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.2)
        proc.returncode = status
        stdout.seek(0)
        lines = [ln for ln in stdout.read().decode(errors="replace").splitlines()
                 if ln.startswith("SUITE_MEMORY ")]
    result: dict[str, Any] = json.loads(lines[-1][13:]) if lines else {"status": "error"}
    if verdict:
        result = {"status": verdict.split(":")[0].split(" ")[0], "reason": verdict}
    elif not lines:
        result["reason"] = f"the child exited with status {status} before reporting"
    result["peak_rss_bytes"] = usage.ru_maxrss * 1024 if usage else None
    result["wall_s"] = round(time.monotonic() - started, 2)
    return result


def _rss(pid: int) -> int:
    """Resident bytes of a process group's leader (the child has no children of its own)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return 0
    return 0


def export_revision(rev: str) -> Path:
    """The evaluator as it was at ``rev``, exported from this repository."""
    target = Path(tempfile.mkdtemp(prefix="suite-memory-before-"))
    archive = subprocess.run(["git", "archive", rev, "tools", "kernelgraph"], cwd=ROOT,
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def summarize(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    runs = [r[key] for r in rows if key in r]
    counts: dict[str, int] = {}
    for run in runs:
        counts[run["status"]] = counts.get(run["status"], 0) + 1
    loaded = [r for r in runs if "load_s" in r]
    frozen = [r for r in runs if r["status"] == "frozen"]
    peaks = [r["peak_rss_bytes"] for r in runs if r.get("peak_rss_bytes")]
    return {
        "tasks": len(runs), "loaded": len(loaded), "frozen": len(frozen), "by_status": counts,
        "max_peak_rss_gib": round(max(peaks) / _GIB, 2) if peaks else None,
        "median_to_first_candidate_s": _median([r["to_first_candidate_s"] for r in frozen]),
        "median_decision_s": _median([r["wall_s"] for r in runs]),
        "reasons": {row["task"]: row[key].get("reason", "") for row in rows
                    if key in row and row[key]["status"] != "frozen"},
    }


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    middle = len(ordered) // 2
    return round(ordered[middle] if len(ordered) % 2 else
                 (ordered[middle - 1] + ordered[middle]) / 2, 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("jaxbench", nargs="?", type=Path,
                        help="JAXBench benchmark directory (<task>/baseline.py inside)")
    parser.add_argument("--tasks", default="", help="comma-separated JAXBench task folders "
                        "(default: all)")
    parser.add_argument("--shipped", action="store_true", help="also the shipped tasks/*.py")
    parser.add_argument("--scale", default="", help="JAXBench scale factors, e.g. 0.25,0.125")
    parser.add_argument("--before", default="", help="git revision of the evaluator to "
                        "compare with (run first, per task)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per task")
    parser.add_argument("--rss-limit-gb", type=float, default=10.0, help="kill a child above")
    parser.add_argument("--limit-data", action="store_true", help="also set the child's "
                        "RLIMIT_DATA to the RSS limit: a limit the evaluator can read")
    parser.add_argument("--plan-only", action="store_true", help="load and check the "
                        "footprint estimate only (status fits/refused), build nothing")
    parser.add_argument("--out", type=Path, help="also write the JSON here, after each task")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    tasks: list[tuple[str, Path, str]] = []
    if args.jaxbench:
        wanted = {t for t in args.tasks.split(",") if t}
        for folder in sorted(args.jaxbench.iterdir(), key=lambda p: p.name):
            if (folder / "baseline.py").is_file() and (not wanted or folder.name in wanted):
                tasks.append((folder.name, folder / "baseline.py", "jaxbench"))
    if args.shipped:
        tasks += [(p.stem, p, "shipped") for p in sorted((ROOT / "tasks").glob("*.py"))
                  if p.stem != "__init__"]
    before_root = export_revision(args.before) if args.before else None
    rss_limit = int(args.rss_limit_gb * _GIB)
    rows: list[dict[str, Any]] = []
    report: dict[str, Any] = {}
    for name, path, source in tasks:
        scales = args.scale if source == "jaxbench" else ""
        row: dict[str, Any] = {"task": name, "source": source, "scale": scales or None}
        if before_root is not None:
            row["before"] = run_child(before_root, path, scales, args.timeout, rss_limit,
                                      args.limit_data, args.plan_only)
        row["after"] = run_child(ROOT, path, scales, args.timeout, rss_limit, args.limit_data,
                                 args.plan_only)
        rows.append(row)
        report = {
            "figure": "suite_memory",
            "machine": {"cpus": os.cpu_count(), "mem_available_gib": _mem_available_gib()},
            "limits": {"timeout_s": args.timeout, "rss_limit_gib": args.rss_limit_gb,
                       "rlimit_data": args.limit_data},
            "before_revision": args.before or None,
            "scale": args.scale or None,
            "plan_only": args.plan_only,
            "summary": {key: summarize(rows, key) for key in ("before", "after")
                        if any(key in r for r in rows)},
            "tasks": rows,
        }
        if args.out:
            args.out.write_text(json.dumps(report, indent=2) + "\n")
        if not args.json:
            _print_row(row)
    if args.json:
        print(json.dumps(report, indent=2))
    return 0


def _mem_available_gib() -> float | None:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return round(int(line.split()[1]) * 1024 / _GIB, 1)
    return None


def _print_row(row: dict[str, Any]) -> None:
    def cell(run: dict[str, Any] | None) -> str:
        if run is None:
            return "-"
        peak = run.get("peak_rss_bytes") or 0
        return f"{run['status']:>8} {peak / _GIB:6.2f} GiB {run.get('wall_s', 0):7.1f} s"

    print(f"{row['task']:<55} before {cell(row.get('before'))} | after {cell(row['after'])}",
          flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
