"""Figure: seconds of one interpret-mode run of the offline author's kernel with JAX's own
`io_callback` path and with host arguments for the interpreter's callbacks
(`tools/child/callbacks.py`), per task, printed as JSON.

For each task (shipped names, or task files such as a JAXBench `baseline.py`, scaled with
`--scale` as `kernelgraph bench --scale` does), the offline author writes its kernel at the
default configuration, and a fresh interpreter per mode traces it at the tuning point and
runs it once to compile, then `--repeats` times under TPU interpret mode as the verifier's
runner does (its transfer and branch counters installed, NaN-poisoned memory, a
randomised grid order; with and without the race detector). Reported per
task and mode: the median seconds of a run, how many host callbacks one run makes, and
whether the two modes' outputs are the same bytes.

Usage: python benchmarks/interpret_callbacks.py [--json] [--repeats 2] [--scale F[,F]]
       [TASK ...]   (default: paged_attention gqa_attention matmul)
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# this folder's modules (benchmarks/agents.py) would shadow the project's packages
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))
DEFAULT_TASKS = ("paged_attention", "gqa_attention", "matmul")

# Run in a fresh interpreter per mode: the replacement is process-wide and permanent.
_CHILD = r"""
import collections, hashlib, json, statistics, sys, threading, time
import numpy as np
task_path, kernel_path = sys.argv[1], sys.argv[2]
host, repeats = sys.argv[3] == "1", int(sys.argv[4])
from tools.child import callbacks, corecompile, interpret
from tools import jaxprivate
interpret.install_second_poison(); corecompile.install()
interpret.RaceLog().install()  # the children's transfer and branch counters, as they run
if host:
    callbacks.install()
module = jaxprivate.callback()
counted, lock = collections.Counter(), threading.Lock()
flat_call = module._FlatCallback.__call__
def counting(self, *args, **kwargs):
    with lock:
        counted["all"] += 1
    return flat_call(self, *args, **kwargs)
module._FlatCallback.__call__ = counting
import importlib.util, jax, jax.numpy as jnp
from tools.inputs.tasks import load_task
task = load_task(task_path)
spec = importlib.util.spec_from_file_location("candidate", kernel_path)
candidate = importlib.util.module_from_spec(spec); spec.loader.exec_module(candidate)
kernel = candidate.build()
inputs = [jnp.asarray(x) for x in task.make_inputs(0, 0)]
closed = jax.make_jaxpr(kernel)(*inputs)
figures = {}
for races in (False, True):
    run = interpret.interpreted(closed, interpret.InterpretSettings(
        detect_races=races, num_cores=1, random_seed=1))
    digest = hashlib.sha256(b"".join(np.asarray(o).tobytes() for o in run(*inputs))).hexdigest()
    seconds = []
    for _ in range(repeats):
        counted.clear()
        started = time.perf_counter()
        [np.asarray(o) for o in run(*inputs)]
        seconds.append(time.perf_counter() - started)
    figures["races" if races else "plain"] = {
        "run_s": round(statistics.median(seconds), 3), "callbacks": counted["all"],
        "outputs_sha256": digest}
print(json.dumps(figures))
"""


def kernel_for(task: Path, folder: Path) -> Path:
    """The offline author's kernel for `task` at its default configuration."""
    from agents.llm.base import LlmRequest
    from agents.llm.offline import OfflineProvider
    from agents.llm.parsing import check_plan, extract_code
    from tools.api import chip_figures

    context = {"task_path": str(task), "task_name": task.stem, "target": "sim-tpu-v6e",
               "chip": chip_figures("sim-tpu-v6e"), "iteration": 0, "seed": 0, "parent": None,
               "failures": [], "hint": "", "knowledge": [], "baseline_s": 1e-5, "feedback": ""}

    def ask(purpose: str, extra: dict[str, Any]) -> str:
        request = LlmRequest(agent="benchmark", purpose=purpose, prompt="(offline)",
                             context={**context, **extra}, seed=0)
        return asyncio.run(OfflineProvider(seed=0).complete(request)).text

    plan = check_plan(ask("plan", {}))
    path = folder / f"{hashlib.sha256(str(task).encode()).hexdigest()[:12]}_kernel.py"
    path.write_text(extract_code(ask("implement", {"plan": plan})))
    return path


def resolve(name: str, scale: str | None) -> Path:
    from kernelgraph.tasknames import shipped_tasks
    from tools.api import scaled_task

    shipped = shipped_tasks()
    path = shipped[name] if name in shipped else Path(name)
    if not path.is_file():
        raise SystemExit(f"{name}: neither a shipped task nor a task file")
    return Path(scaled_task(path, scale)) if scale else path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", nargs="*", default=list(DEFAULT_TASKS))
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per mode")
    parser.add_argument("--scale", default=None, help="as `kernelgraph bench --scale`")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"{args.repeats=} must be positive")
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for name in args.tasks:
            task = resolve(name, args.scale)
            kernel = kernel_for(task, Path(folder))
            modes = {}
            for mode, flag in (("jax_io_callback", "0"), ("host_arguments", "1")):
                done = subprocess.run(
                    [sys.executable, "-c", _CHILD, str(task), str(kernel), flag,
                     str(args.repeats)], cwd=ROOT, capture_output=True, text=True, check=False)
                if done.returncode:
                    raise SystemExit(f"{name} ({mode}): {done.stderr.strip()[-2000:]}")
                modes[mode] = json.loads(done.stdout.strip().splitlines()[-1])
            entry: dict[str, Any] = {}
            for check in ("plain", "races"):
                before, after = modes["jax_io_callback"][check], modes["host_arguments"][check]
                entry[check] = {
                    "run_s": before["run_s"], "run_s_host_arguments": after["run_s"],
                    "speedup": round(before["run_s"] / max(after["run_s"], 1e-9), 2),
                    "callbacks": after["callbacks"],
                    "same_outputs": before["outputs_sha256"] == after["outputs_sha256"]}
            results[Path(name).parent.name if name.endswith(".py") and "/" in name
                    else name] = entry
    figures = {"repeats": args.repeats, "scale": args.scale, "tasks": results,
               "geomean_speedup": round(statistics.geometric_mean(
                   [e[c]["speedup"] for e in results.values() for c in ("plain", "races")]), 2)}
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        for name, entry in results.items():
            print(f"{name:40} " + "  ".join(
                f"{c}: {e['run_s']:.2f} -> {e['run_s_host_arguments']:.2f} s "
                f"({e['callbacks']} callbacks, same outputs {e['same_outputs']})"
                for c, e in entry.items()))


if __name__ == "__main__":
    main()
