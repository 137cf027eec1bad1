"""Analysis figures: the HTML report, the SQL views and the Parquet export on a synthetic log.

Prints one JSON object. The log holds `--events` synthetic events (eventstore/synthetic.py:
runs shaped like real ones, 8 trajectories each). Each figure is measured `--repeat` times;
the main keys are medians and the `*_runs` keys list every repetition, because a shared
2-core machine is noisy.

- `views_create_s`: a reader's first query on a log whose stored views are older (it makes
  them as temporary views); `open_current_views_s`: a read-only open when they are current.
- `query_s`: one `SELECT *` over each analysis view.
- `report_s`: `build_report` over every run (load, every chart, the page), and its parts
  `report_load_s` (the fold) and `report_charts`; `report_cpu_s` is its CPU time, the
  steadier figure on a loaded machine.
- `export_s`: `export_parquet` of the events and every view.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

# Keep this folder off the import path (benchmarks/eventstore.py shadows the package).
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import duckdb  # noqa: E402
import msgspec  # noqa: E402

from eventstore.export import export_parquet  # noqa: E402
from eventstore.log import EventLog  # noqa: E402
from eventstore.synthetic import synthetic_log  # noqa: E402
from eventstore.views import VIEW_NAMES  # noqa: E402
from projections.report import build_report, load  # noqa: E402


def _timed(fn: object) -> float:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print JSON only (the default output)")
    args = parser.parse_args()

    runs: dict[str, list[float]] = {k: [] for k in (
        "views_create_s", "open_current_views_s", "report_s", "report_cpu_s", "report_load_s",
        "export_s")}
    query: dict[str, list[float]] = {name: [] for name in VIEW_NAMES}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.duckdb"
        with EventLog(path) as log:
            log.append(list(synthetic_log(args.events, seed=2)))
            n_runs = len(log.runs())
        for rep in range(args.repeat):
            con = duckdb.connect(str(path))
            con.execute("UPDATE kg_meta SET value = 'old' WHERE key = 'views_sha256'")
            con.close()
            with EventLog(path, read_only=True) as log:
                runs["views_create_s"].append(_timed(lambda log=log: log.sql("SELECT 1")))
                for name in VIEW_NAMES:
                    query[name].append(_timed(lambda log=log, n=name: log.sql(f"SELECT * FROM {n}")))
            EventLog(path).close()  # a writer stores the current views again
            runs["open_current_views_s"].append(
                _timed(lambda: EventLog(path, read_only=True).close()))
            with EventLog(path, read_only=True) as log:
                runs["report_load_s"].append(_timed(lambda log=log: load(log)))
                out = Path(tmp) / f"report{rep}"
                cpu = time.process_time()
                runs["report_s"].append(_timed(lambda log=log, out=out: build_report(log, out)))
                runs["report_cpu_s"].append(time.process_time() - cpu)
                charts = len(list(out.glob("*.png")))
                parquet = Path(tmp) / f"parquet{rep}"
                runs["export_s"].append(_timed(lambda log=log, p=parquet: export_parquet(log, p)))

    result: dict[str, object] = {"events": args.events, "runs": n_runs, "report_charts": charts}
    for key, values in runs.items():
        result[key] = round(statistics.median(values), 4)
        result[f"{key}_runs"] = [round(v, 4) for v in values]
    result["query_s"] = {name: round(statistics.median(v), 4) for name, v in query.items()}
    sys.stdout.write(msgspec.json.encode(result).decode() + "\n")


if __name__ == "__main__":
    main()
