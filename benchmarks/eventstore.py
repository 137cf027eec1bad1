"""Event-store figures: batched append, replay (decode + fold), and `kernelgraph replay` wall time.

Prints one JSON object. Events are synthetic but shaped like real runs (see
eventstore/synthetic.py): ~440-byte bodies across the whole event vocabulary.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# This file shares its name with the `eventstore` package; keep its folder off the import path.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import msgspec  # noqa: E402

from eventstore.log import EventLog  # noqa: E402
from eventstore.synthetic import synthetic_log  # noqa: E402
from projections.replay import LogView  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=5_000, help="events per append call")
    parser.add_argument("--json", action="store_true", help="print JSON only (the default output)")
    args = parser.parse_args()

    events = list(synthetic_log(args.events, seed=1))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.duckdb"
        log = EventLog(path)
        start = time.perf_counter()
        for i in range(0, len(events), args.batch):
            log.append(events[i : i + args.batch])
        append_s = time.perf_counter() - start

        start = time.perf_counter()
        dup = log.append(events[-args.batch :])
        duplicate_batch_s = time.perf_counter() - start
        assert dup.appended == 0, dup

        start = time.perf_counter()
        view = LogView().apply_records(log.read())
        replay_s = time.perf_counter() - start
        assert view.events == len(events), (view.events, len(events))

        start = time.perf_counter()
        report = log.verify()
        verify_s = time.perf_counter() - start
        assert report.ok, report
        log.close()
        size = os.path.getsize(path)

        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "kernelgraph", "replay", str(path), "--json"],
            capture_output=True, check=False,
        )
        replay_cli_s = time.perf_counter() - start
        if proc.returncode != 0:
            sys.exit(f"kernelgraph replay failed: {proc.stderr.decode()}")
        out = msgspec.json.decode(proc.stdout)
        assert out["events"] == len(events)

    print(msgspec.json.encode({
        "events": len(events),
        "batch": args.batch,
        "append_events_per_s": round(len(events) / append_s),
        "duplicate_batch_ms": round(duplicate_batch_s * 1000, 2),
        "replay_events_per_s": round(len(events) / replay_s),
        "verify_events_per_s": round(len(events) / verify_s),
        "replay_cli_s": round(replay_cli_s, 3),
        "log_bytes": size,
        "cpus": os.cpu_count(),
    }).decode())


if __name__ == "__main__":
    main()
