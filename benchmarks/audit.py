"""Audit figures: what an audit costs the recorder and the auditor, by log size.

    python benchmarks/audit.py --json

For each log size (synthetic events shaped like real runs, eventstore/synthetic.py) one
recorder serves the log over an embedded nats-server, and one run of the log is asked about:

- `verify_s`: `EventLog.verify()` of the whole log alone (the recorder's thread is busy
  this long, between commits, when rows were appended since the last question).
- `ask_cold_ms`: a `kg.log.verify` round trip that recomputes the chain.
- `ask_warm_ms`: the same when nothing was appended since (the cached verification: the
  run's rows, their digest and the artifact lookup only); median of `--repeat`.
- `audit_ms_per_1k_events`: `audit_run` on the log's runs (every check, events already
  read), per thousand events. Synthetic runs store no artifacts, so this excludes artifact reads and receipt
  checks: a lower bound for a real run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# benchmarks/bus.py and benchmarks/eventstore.py would shadow the packages: keep this folder
# off the import path.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from bus.connection import Credentials, connect  # noqa: E402
from bus.logverify import ask_log  # noqa: E402
from bus.recorder import Recorder  # noqa: E402
from bus.server import EmbeddedNats  # noqa: E402
from eventstore.log import EventLog  # noqa: E402
from eventstore.synthetic import synthetic_log  # noqa: E402
from projections.audit import ChainStatus, audit_run  # noqa: E402


def _audit_rate(log: EventLog) -> float:
    """Milliseconds of `audit_run` per thousand events (the events already read)."""
    runs = [list(log.events(run_id=r.run_id)) for r in log.runs()]
    started = time.perf_counter()
    for run in runs:
        audit_run(run, fetch=lambda sha: None, chain=ChainStatus(ok=True),
                  receipt_problems=lambda receipt: [])
    return (time.perf_counter() - started) / sum(map(len, runs)) * 1000 * 1000


async def _ask(server: EmbeddedNats, log: EventLog, run_id: str, repeat: int) -> dict[str, Any]:
    nc = await connect(server.url, name="bench", credentials=Credentials())
    rec_nc = await connect(server.url, name="bench-recorder", credentials=Credentials())
    recorder = Recorder(rec_nc, log)
    await recorder.start()
    try:
        started = time.perf_counter()
        reply = await ask_log(nc, run_id, timeout=120)
        cold = (time.perf_counter() - started) * 1000
        warm = []
        for _ in range(repeat):
            started = time.perf_counter()
            await ask_log(nc, run_id, timeout=120)
            warm.append((time.perf_counter() - started) * 1000)
    finally:
        await recorder.stop()
        await rec_nc.close()
        await nc.close()
    return {"ask_cold_ms": round(cold, 2), "ask_warm_ms": round(statistics.median(warm), 2),
            "ask_warm_ms_runs": [round(w, 2) for w in warm], "run_events": len(reply.event_ids),
            "chain_ok": reply.chain_ok}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print JSON only (the default output)")
    args = parser.parse_args()
    sizes = []
    with tempfile.TemporaryDirectory() as tmp:
        for total in args.events:
            path = Path(tmp) / f"log{total}.duckdb"
            with EventLog(path) as log:
                log.append(list(synthetic_log(total, seed=1)))
                started = time.perf_counter()
                assert log.verify().ok
                verify_s = time.perf_counter() - started
                per_1k = _audit_rate(log)
                run_id = log.runs()[0].run_id
                server = EmbeddedNats(Path(tmp) / f"nats{total}")
                server.start()
                try:
                    asked = asyncio.run(_ask(server, log, run_id, args.repeat))
                finally:
                    server.stop()
            sizes.append({"log_events": total, "verify_s": round(verify_s, 3),
                          "audit_ms_per_1k_events": round(per_1k, 2), **asked})
    print(json.dumps({"benchmark": "audit", "sizes": sizes}))


if __name__ == "__main__":
    main()
