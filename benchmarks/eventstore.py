"""Event-store figures: batched append, replay (decode + fold), and `kernelgraph replay` wall time.

Prints one JSON object. Events are synthetic but shaped like real runs (see
eventstore/synthetic.py): ~440-byte JSON bodies across the whole event vocabulary.
Each figure is measured `--repeat` times on fresh files; the main keys are medians and
the `*_runs` keys list every repetition, because a shared 2-core machine is noisy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# This file shares its name with the `eventstore` package; keep its folder off the import path.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import msgspec  # noqa: E402

from eventstore.events import Event  # noqa: E402
from eventstore.log import EventLog  # noqa: E402
from eventstore.synthetic import synthetic_log  # noqa: E402
from projections.replay import LogView  # noqa: E402


def _append_rate(path: Path, events: list[Event], batch: int) -> float:
    with EventLog(path) as log:
        start = time.perf_counter()
        for i in range(0, len(events), batch):
            log.append(events[i : i + batch])
        return len(events) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=10_000, help="events per append call")
    parser.add_argument("--small-batch", type=int, default=1_000,
                        help="also report append throughput at this batch size")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print JSON only (the default output)")
    args = parser.parse_args()

    events = list(synthetic_log(args.events, seed=1))
    append, small, replay, verify, cli, dup_ms = [], [], [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeat):
            path = Path(tmp) / f"bench{rep}.duckdb"
            append.append(_append_rate(path, events, args.batch))
            small.append(_append_rate(Path(tmp) / f"small{rep}.duckdb", events, args.small_batch))

            with EventLog(path) as log:
                start = time.perf_counter()
                result = log.append(events[-args.batch :])
                dup_ms.append((time.perf_counter() - start) * 1000)
                assert result.appended == 0, result

            with EventLog(path, read_only=True) as log:
                start = time.perf_counter()
                view = LogView().apply_records(log.read())
                replay.append(len(events) / (time.perf_counter() - start))
                assert view.events == len(events), (view.events, len(events))
                start = time.perf_counter()
                report = log.verify()
                verify.append(len(events) / (time.perf_counter() - start))
                assert report.ok, report
            size = os.path.getsize(path)

            start = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-m", "kernelgraph", "replay", str(path), "--json"],
                capture_output=True, check=False,
            )
            cli.append(time.perf_counter() - start)
            if proc.returncode != 0:
                sys.exit(f"kernelgraph replay failed: {proc.stderr.decode()}")
            assert msgspec.json.decode(proc.stdout)["events"] == len(events)

    def med(values: list[float], digits: int = 0) -> float:
        return round(statistics.median(values), digits or None)

    print(msgspec.json.encode({
        "events": len(events),
        "batch": args.batch,
        "append_events_per_s": med(append),
        f"append_events_per_s_batch_{args.small_batch}": med(small),
        "duplicate_batch_ms": med(dup_ms, 2),
        "replay_events_per_s": med(replay),
        "verify_events_per_s": med(verify),
        "replay_cli_s": med(cli, 3),
        "log_bytes": size,
        "append_events_per_s_runs": [round(v) for v in append],
        "replay_events_per_s_runs": [round(v) for v in replay],
        "replay_cli_s_runs": [round(v, 3) for v in cli],
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }).decode())


if __name__ == "__main__":
    main()
