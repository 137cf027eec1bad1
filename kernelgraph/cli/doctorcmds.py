"""`kernelgraph doctor`: what this machine offers the sandbox, before a run needs it."""

from __future__ import annotations

from typing import Annotated

import typer

from kernelgraph.cli.app import WeakSandboxOpt, app, console, emit_json

_LABELS = {
    "user_namespace": "user namespace (unprivileged)",
    "mount_namespace": "mount namespace",
    "pid_namespace": "PID namespace",
    "net_namespace": "network namespace",
    "uid_drop": "uid drop to 65534 (needs root)",
    "cgroup_memory": "cgroup memory limit",
    "cgroup_pids": "cgroup task limit",
    "private_tmp": "private /tmp, read-only filesystem",
    "full_sandbox": "full sandbox",
}


@app.command()
def doctor(
    allow_weak_sandbox: WeakSandboxOpt = False,
    json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Show what this machine offers the sandbox that runs candidate code: namespaces, the uid drop, control groups, a private /tmp, and the TPU compiler (libtpu) if installed.

    Candidate code runs only in the full sandbox, unless --allow-weak-sandbox (or
    KG_ALLOW_WEAK_SANDBOX=1) is given. Exit status 0 when candidate code would run, 1 when
    not."""
    from tools.sandbox import doctor as checks
    from tools.sandbox import policy

    if allow_weak_sandbox:
        policy.allow_weak()
    found = checks.report()
    if json:
        emit_json(found)
    else:
        for name, ok in found["checks"].items():
            mark = "[green]yes[/]" if ok else "[red]no[/]"
            console.print(f"  {_LABELS.get(name, name):<38} {mark}", highlight=False)
        tpu = found["tpu_compiler"]
        console.print(f"  {'TPU compiler (libtpu)':<38} "
                      + (f"[green]{tpu}[/]" if tpu else "not installed (emulated compile check; "
                                                          "XLA baseline priced from the host program)"),
                      highlight=False)
        if found["problem"]:
            console.print(f"problem: {found['problem']}", highlight=False)
            console.print(f"fix: {found['fix']}", highlight=False)
        runs = found["candidate_code_runs"]
        colour = "green" if runs == "full sandbox" else "yellow" if runs != "no" else "red"
        console.print(f"candidate code runs: [bold {colour}]{runs}[/]", highlight=False)
    raise typer.Exit(0 if found["candidate_code_runs"] != "no" else 1)
