"""What a fresh interpreter pays before a sandboxed child does any work, printed as JSON.

Every candidate's compile check, tests and pricing start sandboxed children that import JAX
(and Pallas); the test suite starts hundreds. For each import line below, a fresh
interpreter runs it `--repeats` times and the median CPU seconds (user + system, the child's
own) are reported, with the versions of the packages that decide it (JAX, numpy and
ml_dtypes, whose 0.7.0 registers its ufunc loops in quadratic time).

`--pythonpath DIR` puts DIR first on the children's path: point it at a folder with other
versions (`pip install --target DIR ml_dtypes==0.7.0`) to compare them on this machine.

Usage: python benchmarks/startup.py [--json] [--repeats 5] [--pythonpath DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys

IMPORTS = {
    "ml_dtypes": "import numpy, ml_dtypes",
    "jax": "import jax",
    "jax_pallas_tpu": ("import jax, jax.numpy; from jax.experimental import pallas; "
                       "from jax.experimental.pallas import tpu"),
}
VERSIONS = ("import importlib.metadata as m, json; "
            "print(json.dumps({p: m.version(p) for p in ('jax', 'numpy', 'ml_dtypes')}))")


def child_cpu_s(code: str, env: dict[str, str]) -> float:
    """CPU seconds of one fresh interpreter running `code`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--repeats", type=int, default=5, help="interpreters per import line")
    parser.add_argument("--pythonpath", default="", help="a folder put first on the path")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"{args.repeats=} must be positive")
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    if args.pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.pythonpath, env.get("PYTHONPATH")]))
    versions = json.loads(subprocess.run([sys.executable, "-c", VERSIONS], env=env, check=True,
                                         capture_output=True, text=True).stdout)
    child_cpu_s("pass", env)  # warm the page cache
    figures = {}
    for name, code in IMPORTS.items():
        samples = [child_cpu_s(code, env) for _ in range(args.repeats)]
        figures[name] = {"median_cpu_s": round(statistics.median(samples), 3),
                         "min_cpu_s": round(min(samples), 3), "samples": len(samples)}
    result = {"versions": versions, "imports": figures, "repeats": args.repeats,
              "pythonpath": args.pythonpath, "python": platform.python_version(),
              "cpus": os.cpu_count(), "load_1min": round(os.getloadavg()[0], 2)}
    if args.json:
        print(json.dumps(result))
        return
    print(f"versions: {versions}")
    for name, figure in figures.items():
        print(f"{name:16s} median {figure['median_cpu_s']:.3f} CPU-s (min {figure['min_cpu_s']:.3f})")


if __name__ == "__main__":
    main()
