"""Commands of the independent verifier: `verify` and `verify-receipt`."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated, Any

import msgspec
import typer
from rich import box
from rich.table import Table
from rich.text import Text

from kernelgraph.cli.app import (
    WeakSandboxOpt,
    app,
    console,
    emit_json,
    fail,
    parse_config,
    sandbox_gate,
    task_arg,
)
from kernelgraph.cli.scaleopt import ScaleOpt, apply_scale

_TaskArg = Annotated[Path, typer.Argument(
    help="Task file: a kernelgraph task (reference, make_inputs, SHAPES) or a JAXBench "
         "baseline.py (CONFIG, create_inputs, workload); or a shipped task's name (see "
         "`kernelgraph tasks`).", show_default=False)]
_CandidateArg = Annotated[Path, typer.Argument(
    help="Candidate kernel file: defines build(**knobs) and optionally TUNABLES.",
    show_default=False)]
_JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]


@app.command()
def verify(
    task: _TaskArg,
    candidate: _CandidateArg,
    target: Annotated[str, typer.Option(
        "--target", help="sim-tpu-v6e | sim-tpu-v5e | sim-tpu-v7 (simulated timing) or "
        "tpu | gpu (timed on the device).")] = "sim-tpu-v6e",
    config: Annotated[list[str] | None, typer.Option(
        "--config", help="A tunable as NAME=VALUE (repeat); default: the first value of "
        "each TUNABLES entry.")] = None,
    receipt_out: Annotated[Path | None, typer.Option(
        "--receipt-out", help="Write the self-hashed receipt (JSON) to this file.")] = None,
    time_limit: Annotated[float, typer.Option(
        "--time-limit", min=5.0, help="Seconds the sandboxed candidate may run in all.")] = 300.0,
    memory_gb: Annotated[float, typer.Option(
        "--memory-gb", min=0.5, help="Address-space limit of the sandboxed candidate.")] = 4.0,
    scale: ScaleOpt = None,
    allow_weak_sandbox: WeakSandboxOpt = False,
    json: _JsonOpt = False,
) -> None:
    """Verify a candidate kernel against a task, independently of whoever wrote it.

    Freezes a test suite (seeds, unseen shapes, magnitude probes; float64 oracle and the reference's own error as the floor), runs the candidate in a sandboxed child under TPU interpret mode (NaN-poisoned memory, race detection, randomised parallel grid order), checks the TPU lowering, the VMEM budget and that the work happens inside pallas_call, and times only a correct candidate.

    Exit status 0 only on a pass, 1 on a fail, 2 on a usage error. The receipt's sha256 covers every number the verdict follows from.
    """
    task = task_arg(task)
    if not candidate.is_file():
        fail(f"{candidate}: no such candidate file")
    sandbox_gate(allow_weak_sandbox)
    from kernelgraph.errors import KernelgraphError
    from tools.performance.executors import TARGETS
    from tools.sandbox.launcher import Limits
    from tools.verification.receipts import write_receipt
    from tools.verification.verify import evaluate

    if target not in TARGETS:
        fail(f"unknown target {target!r}; known: {', '.join(TARGETS)}")
    task = apply_scale(task, scale)
    limits = Limits(wall_s=time_limit, memory_bytes=int(memory_gb * (1 << 30)))
    status = (console.status(f"verifying {candidate.name} on {target}", spinner="dots")
              if not json else contextlib.nullcontext())
    with status:
        try:
            verdict = evaluate(task, candidate, config=parse_config(config or []),
                               target=target, limits=limits)
        except KernelgraphError as exc:  # TaskError, SuiteError, CandidateError, TargetUnavailable, ...
            fail(str(exc))
    if receipt_out is not None:
        write_receipt(verdict.receipt, receipt_out)
    if json:
        emit_json(verdict.summary())
    else:
        _render(verdict, receipt_out)
    raise typer.Exit(0 if verdict.passed else 1)


def _render(verdict: Any, receipt_out: Path | None) -> None:
    """Tables sized for an 80-column terminal: errors to 2 significant digits."""
    table = Table(title=f"{Path(verdict.candidate).name} vs {Path(verdict.task).name} "
                        f"({verdict.target})",
                  box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    table.add_column("case", overflow="fold")
    table.add_column("kind", overflow="fold")
    for column in ("max err", "limit", "mean err", "limit"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("result", no_wrap=True)
    for case in verdict.cases:
        if not case.outputs:  # the error text is among the reasons below
            table.add_row(case.case_id, case.kind, "-", "-", "-", "-", "[red]error[/]")
            continue
        for out in case.outputs:
            mark = "*" if out.conditioning_multiple else ""  # judged beyond the conditioning
            table.add_row(
                case.case_id if out.index == 0 else "", case.kind if out.index == 0 else "",
                _error(out.beyond_max_abs if mark else out.max_abs) + mark,
                _error(out.max_threshold),
                _error(out.beyond_mean_abs if mark else out.mean_abs) + mark,
                _error(out.mean_threshold),
                "[green]ok[/]" if out.passed else "[red]fail[/]",
            )
    console.print(table)
    conditioned = [o for c in verdict.cases for o in c.outputs if o.conditioning_multiple]
    if conditioned:
        console.print(f"* the error beyond {conditioned[0].conditioning_multiple:g}x the "
                      "oracle's own change when the inputs move by one ulp (an ill-conditioned "
                      "probe; the suite notes where); the whole max err was "
                      + ", ".join(_error(o.max_abs).strip() for o in conditioned),
                      style="dim", highlight=False)
    tolerance = verdict.receipt.get("checks", {}).get("tolerance", {})
    console.print("limit = 2 x the reference's own error against the float64 oracle + a few "
                  "ulps;\nevery element also within the task tolerance"
                  + "".join(f", {k}={v:g}" for k, v in sorted(tolerance.items())),
                  style="dim", highlight=False)
    if verdict.measurement is not None:
        m = verdict.measurement
        label = "speedup (simulated)" if m.measured_on == "simulated" else "speedup (measured)"
        console.print(f"{label}: [bold]{m.speedup:.2f}x[/]  latency {m.latency_s:.3e} s vs "
                      f"XLA baseline {m.baseline_s:.3e} s")
        if m.breakdown.get("baseline_method"):
            console.print(f"XLA baseline: {m.breakdown['baseline_method']}", style="dim",
                          highlight=False)
    colour = "green" if verdict.passed else "red"
    console.print(f"verdict: [bold {colour}]{verdict.verdict}[/]")
    if verdict.weak_sandbox:
        console.print("[bold yellow]sandbox: weak[/] (the candidate ran without the full "
                      "sandbox, by --allow-weak-sandbox; the receipt records it)")
    notes = [Text(reason) for reason in verdict.reasons]
    for d in verdict.diagnostics[:5]:
        where = f" (line {d.line})" if d.line else ""
        hint = f" hint: {d.hint}" if d.hint else ""
        notes.append(Text(f"diagnostic [{d.phase}]{where}: {d.message}{hint}"))
    if notes:
        hanging = Table.grid(padding=(0, 1))
        hanging.add_column(no_wrap=True)
        hanging.add_column(overflow="fold")
        for note in notes:
            hanging.add_row("  -", note)
        console.print(hanging)
    console.print(f"receipt sha256: {verdict.receipt_sha256}"
                  + (f" (written to {receipt_out})" if receipt_out else ""))


def _error(value: float) -> str:
    """An error or limit in 7 characters; a negative value is one that was not computed."""
    if value < 0:
        return "-"
    return "0" if value == 0 else f"{value:.1e}"


@app.command("verify-receipt")
def verify_receipt(
    file: Annotated[Path, typer.Argument(help="A receipt written by `kernelgraph verify "
                                              "--receipt-out`.", show_default=False)],
    candidate: Annotated[Path | None, typer.Option(
        "--candidate", help="The kernel file the receipt is said to be for: its sha256 must "
        "be the one the receipt signed.", show_default=False)] = None,
    task: Annotated[Path | None, typer.Option(
        "--task", help="The task file (or a shipped task's name) the receipt is said to be "
        "for: its sha256 must be the one the receipt signed.", show_default=False)] = None,
    signature_only: Annotated[bool, typer.Option(
        "--signature-only", help="Check the receipt by itself (signature, hash, verdict, "
        "speedup) without a candidate file; says nothing about any kernel.")] = False,
    trust_key: Annotated[list[str] | None, typer.Option(
        "--trust-key", help="Also accept receipts signed by the key with this fingerprint "
        "(repeat); default: only this installation's key.")] = None,
    json: _JsonOpt = False,
) -> None:
    """Re-check a receipt against the kernel (and task) it is for: the sha256 of --candidate (and --task) must be the ones it signed; its Ed25519 signature and which key made it, its sha256, that its verdict follows from the numbers in it (the same rule the verifier applies) and its speedup from its latency and baseline. Exit status 0 when all hold.

    A genuine receipt proves nothing about a file it is not checked against, so --candidate is required; --signature-only checks the receipt alone and says so.
    """
    from tools.verification.receipts import (
        ReceiptError,
        check_receipt,
        installation_fingerprints,
        load_receipt,
    )
    from tools.verification.signing import SigningError

    if candidate is None and not signature_only:
        fail("a receipt vouches for one kernel file: give --candidate FILE (and --task TASK) "
             "to check it against that file, or --signature-only to check the receipt alone")
    if candidate is not None and signature_only:
        fail("--signature-only checks no file; give it or --candidate, not both")
    if candidate is not None and not candidate.is_file():
        fail(f"{candidate}: no such candidate file")
    task_path = task_arg(task) if task is not None else None
    try:
        own = installation_fingerprints()
        result = check_receipt(
            load_receipt(file), trusted=own | set(trust_key or ()),
            candidate=candidate.read_bytes() if candidate is not None else None,
            task=task_path.read_bytes() if task_path is not None else None)
    except (ReceiptError, SigningError, OSError) as exc:
        fail(str(exc))
    if json:
        emit_json({**msgspec.to_builtins(result), "bound": result.bound,
                   "candidate": str(candidate) if candidate else None,
                   "task": str(task_path) if task_path else None})
        raise typer.Exit(0 if result.ok else 1)
    if result.binding:  # the one line that matters most: which file is not the signed one
        console.print(f"{file}: [red]FAILED[/]  {result.binding[0]}", highlight=False, soft_wrap=True)
    elif not result.ok:
        console.print(f"{file}: [red]FAILED[/]  verdict {result.recorded_verdict!r}, sha256 "
                      f"{result.sha256[:16]}...", highlight=False, soft_wrap=True)
    elif result.bound:
        console.print(f"{file}: [green]ok[/]  verdict {result.recorded_verdict!r} for "
                      f"{candidate}" + (f" on task {task_path}" if task_path else
                                        " (task not checked: no --task)")
                      + f", sha256 {result.sha256[:16]}...", highlight=False, soft_wrap=True)
    else:
        console.print(f"{file}: signature ok, receipt only  verdict "
                      f"{result.recorded_verdict!r}, sha256 {result.sha256[:16]}...; no kernel "
                      "file was checked (--candidate FILE binds it)", highlight=False, soft_wrap=True)
    if result.key_fingerprint:
        whose = ("this installation's key" if result.key_fingerprint in own
                 else "a trusted key" if result.key_trusted else "an untrusted key")
        console.print(f"  signed by key {result.key_fingerprint} ({whose})", highlight=False, soft_wrap=True)
    for problem in result.problems[1 if result.binding else 0:]:
        console.print(f"  - {problem}", highlight=False, soft_wrap=True)
    raise typer.Exit(0 if result.ok else 1)
