"""End-to-end verification: honest kernels pass, each known way to fool the evaluator fails
with a reason that names it. Every evaluation runs the candidate in a real sandboxed child.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tools.correctness.testsuite import FrozenSuite, build_suite
from tools.inputs.tasks import load_task
from tools.sandbox import cgroups
from tools.sandbox.launcher import Limits, SandboxResult, run_sandboxed
from tools.verification import runner as runner_module
from tools.verification.receipts import check_receipt
from tools.verification.verify import Verdict, evaluate

ROOT = Path(__file__).resolve().parent.parent
TASKS = ROOT / "tests" / "evaltasks"
CANDIDATES = ROOT / "tests" / "candidates"
LIMITS = Limits(wall_s=120.0, memory_bytes=4 << 30)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def suites() -> dict[str, FrozenSuite]:
    """One frozen suite per test task (two seeds, unseen shapes, probes), shared."""
    return {name: build_suite(load_task(TASKS / f"{name}.py"), seeds=(0, 1))
            for name in ("rmsnorm_small", "gelu_small", "matmul_small")}


def run(suites: dict[str, FrozenSuite], task: str, candidate: Path, *,
        config: dict | None = None, limits: Limits = LIMITS) -> Verdict:
    return evaluate(TASKS / f"{task}.py", candidate, config=config, suite=suites[task],
                    limits=limits)


@pytest.mark.parametrize(
    ("task", "kernel", "config"),
    [
        ("gelu_small", "gelu.py", None),  # elementwise
        ("rmsnorm_small", "rmsnorm.py", {"block_rows": 64}),  # row-wise norm, partial blocks
        ("matmul_small", "matmul.py", {"block_k": 128}),  # 4 K steps into a VMEM accumulator
    ],
)
def test_honest_kernels_pass(suites, task: str, kernel: str, config: dict | None) -> None:
    verdict = run(suites, task, ROOT / "kernels" / kernel, config=config)
    assert verdict.verdict == "pass", verdict.reasons
    assert verdict.reasons == []
    assert all(c.passed for c in verdict.cases)
    assert len(verdict.cases) == len(suites[task].cases) >= 5
    assert verdict.measured_on == "simulated" and verdict.speedup and verdict.speedup > 0
    assert verdict.compile_report is not None and verdict.compile_report.ok
    assert verdict.audit is not None and verdict.audit.kernels == 1
    assert check_receipt(verdict.receipt).ok
    assert verdict.receipt["environment"]["isolation"]
    assert verdict.receipt["environment"]["limits"]["max_tasks"] == LIMITS.max_tasks
    assert not cgroups.leftover_groups()


ADVERSARIAL = [
    ("rmsnorm_small", "no_kernel.py", None, ["no Pallas kernel"]),
    ("rmsnorm_small", "xla_math_copy_kernel.py", None,
     ["math runs in XLA outside the Pallas kernel", "stablehlo.rsqrt"]),
    ("rmsnorm_small", "half_grid.py", None, ["the grid does not cover the output", "NaN"]),
    ("rmsnorm_small", "memoised.py", None,
     ["results memoised across calls", "non-uniform constants"]),
    ("rmsnorm_small", "hardcoded_shapes.py", None, ["shapes hard-coded to the tuning point"]),
    ("rmsnorm_small", "monkeypatch_compare.py", None,
     ["tampered with the evaluation process", "numpy.allclose", "max-abs error"]),
    ("matmul_small", "parallel_accumulation.py", {"block_k": 128},
     ["accumulation over a parallel axis"]),
    ("rmsnorm_small", "nonfinite.py", None, ["1 non-finite element"]),
    # What is run (CPU lowering) must be what is audited and modelled (TPU lowering).
    ("rmsnorm_small", "custom_primitive_lowering.py", None,
     ["tampered with the evaluation process", "primitive `layout_hint` (defined by the candidate)"]),
    ("rmsnorm_small", "platform_lowering_override.py", None,
     ["tampered with the evaluation process", "mlir lowering rule of `rsqrt` (tpu)"]),
]


@pytest.mark.parametrize(("task", "candidate", "config", "expected"), ADVERSARIAL,
                         ids=[a[1].removesuffix(".py") for a in ADVERSARIAL])
def test_adversarial_candidates_are_rejected_with_a_named_reason(
    suites, task: str, candidate: str, config: dict | None, expected: list[str]
) -> None:
    verdict = run(suites, task, CANDIDATES / candidate, config=config)
    assert verdict.verdict == "fail"
    text = "\n".join(verdict.reasons)
    for phrase in expected:
        assert phrase in text, text
    assert verdict.measurement is None  # a wrong kernel is never timed
    assert check_receipt(verdict.receipt).ok


def test_a_build_that_never_returns_is_killed_within_the_limit(suites) -> None:
    started = time.monotonic()
    verdict = run(suites, "rmsnorm_small", CANDIDATES / "never_returns.py",
                  limits=Limits(wall_s=15.0))
    assert time.monotonic() - started < 15.0 + 20.0
    assert verdict.verdict == "fail"
    assert any("time limit of 15 s" in r for r in verdict.reasons), verdict.reasons


def test_a_build_that_grabs_64gb_is_rejected_and_the_verifier_survives(suites) -> None:
    verdict = run(suites, "rmsnorm_small", CANDIDATES / "grabs_64gb.py")
    assert verdict.verdict == "fail"
    assert any("MemoryError" in r or "memory limit" in r for r in verdict.reasons), \
        verdict.reasons
    again = run(suites, "rmsnorm_small", ROOT / "kernels" / "rmsnorm.py",
                config={"block_rows": 64})
    assert again.verdict == "pass"


def test_candidate_sees_no_secret_of_the_parent(suites, monkeypatch) -> None:
    secret = "fake-gemini-key-0123456789"
    monkeypatch.setenv("GEMINI_API_KEY", secret)
    monkeypatch.setenv("NATS_TOKEN", secret)
    exfil = Path("/tmp/kernelgraph-exfil-test.txt")
    exfil.unlink(missing_ok=True)
    verdict = run(suites, "rmsnorm_small", CANDIDATES / "reads_secrets.py")
    # The candidate doubles its output if it found anything, so a pass means it saw nothing
    # in its environment nor in any /proc/<pid>/environ, and its file write went nowhere.
    assert verdict.verdict == "pass", verdict.reasons
    assert not exfil.exists() or secret not in exfil.read_text()
    assert secret not in json.dumps(verdict.receipt)


def test_candidate_neither_reads_nor_plants_the_compilation_cache(suites, monkeypatch,
                                                                   tmp_path: Path) -> None:
    """The parent's JAX cache is on, a user's JAX cache setting is in its environment, and
    the candidate knows the folder: it still finds no cache setting in its process, cannot
    list the folder and cannot write to it."""
    import jax

    from tools import compilecache

    monkeypatch.setenv(compilecache.CACHE_ENV, str(tmp_path / "xla"))
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "users-own"))
    before = jax.config.jax_compilation_cache_dir
    folder = compilecache.enable()
    try:
        assert folder is not None and folder.is_dir()
        jax.jit(lambda x: x * 3.0)(jax.numpy.ones(7)).block_until_ready()
        assert any(folder.iterdir())  # the parent's compile was kept
        source = (CANDIDATES / "reads_compile_cache.py").read_text()
        candidate = tmp_path / "reads_compile_cache.py"
        candidate.write_text(source.replace('CACHE_FOLDER = "/nonexistent"',
                                            f"CACHE_FOLDER = {str(folder)!r}"))
        verdict = run(suites, "rmsnorm_small", candidate)
        assert verdict.verdict == "pass", verdict.reasons
        assert not (folder / "planted-cache").exists()
    finally:
        jax.config.update("jax_compilation_cache_dir", before)
        from jax.experimental.compilation_cache import compilation_cache

        compilation_cache.reset_cache()


def test_cli_verify_json_and_receipt_round_trip(tmp_path: Path) -> None:
    from kernelgraph.cli import app, load_commands

    load_commands()
    runner = CliRunner()
    receipt = tmp_path / "receipt.json"
    result = runner.invoke(app, ["verify", str(TASKS / "gelu_small.py"),
                                 str(ROOT / "kernels" / "gelu.py"), "--json",
                                 "--receipt-out", str(receipt)])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["verdict"] == "pass" and summary["reasons"] == []
    assert summary["measured_on"] == "simulated" and summary["speedup"] > 0
    assert summary["receipt_sha256"] == json.loads(receipt.read_text())["sha256"]

    bound = ["--candidate", str(ROOT / "kernels" / "gelu.py"), "--task", str(TASKS / "gelu_small.py")]
    checked = runner.invoke(app, ["verify-receipt", str(receipt), *bound, "--json"])
    assert checked.exit_code == 0 and json.loads(checked.stdout)["ok"] is True
    other = runner.invoke(app, ["verify-receipt", str(receipt), "--candidate",
                                str(CANDIDATES / "no_kernel.py")])
    assert other.exit_code == 1 and "the candidate file's sha256" in other.stdout

    edited = json.loads(receipt.read_text())
    edited["verdict"] = "fail"
    receipt.write_text(json.dumps(edited))
    assert runner.invoke(app, ["verify-receipt", str(receipt), *bound]).exit_code == 1

    failing = runner.invoke(app, ["verify", str(TASKS / "gelu_small.py"),
                                  str(CANDIDATES / "no_kernel.py"), "--json"])
    assert failing.exit_code == 1
    assert json.loads(failing.stdout.strip().splitlines()[-1])["verdict"] == "fail"

    missing = runner.invoke(app, ["verify", str(tmp_path / "nope.py"),
                                  str(ROOT / "kernels" / "gelu.py")])
    assert missing.exit_code == 2


def test_a_kernel_the_cost_model_cannot_read_fails_closed(suites, monkeypatch) -> None:
    """A correct kernel with no trustworthy speedup is not a pass."""
    from tools.lowered.mosaic import MosaicError
    from tools.performance.executors import SimExecutor

    def unreadable(self, lowered, reference_cost, inputs=None, cases=None, text=""):
        raise MosaicError("unknown op 'arith.shli' in an index map")

    monkeypatch.setattr(SimExecutor, "estimate", unreadable)
    verdict = run(suites, "gelu_small", ROOT / "kernels" / "gelu.py")
    assert verdict.verdict == "fail"
    assert any("timing failed: MosaicError" in r for r in verdict.reasons), verdict.reasons
    assert verdict.speedup is None
    assert check_receipt(verdict.receipt).ok


def test_work_the_cost_model_cannot_count_fails_closed(suites) -> None:
    """A correct kernel whose K loop runs a data-dependent number of times: the model would
    count its body once (a 4x flops under-count here), so the speedup is no bound: fail."""
    verdict = run(suites, "matmul_small", CANDIDATES / "hidden_trip_count.py")
    assert verdict.verdict == "fail"
    assert all(c.passed for c in verdict.cases)  # correct: only the speed claim is unsound
    assert any("timing: the model cannot count the work of kernel" in r
               and "trip count depends on data" in r for r in verdict.reasons), verdict.reasons
    assert check_receipt(verdict.receipt).ok


def test_a_malformed_child_result_fails_the_candidate_not_the_verifier(suites) -> None:
    """A result written by the candidate itself is read for its programs only (it has none
    here); the outputs it carries, malformed or not, are never decoded."""
    verdict = run(suites, "rmsnorm_small", CANDIDATES / "malformed_result.py")
    assert verdict.verdict == "fail"
    assert any("the worker sent no program for this shape" in r for r in verdict.reasons), \
        verdict.reasons
    assert check_receipt(verdict.receipt).ok


def test_a_forged_child_result_is_rejected(suites) -> None:
    """The worker that imports the candidate reports programs only; a result forged there
    (a decoy kernel's text, outputs computed by plain XLA) has no program to run, and the
    lowered text and outputs are the runner's (tools/child/runner.py)."""
    verdict = run(suites, "rmsnorm_small", CANDIDATES / "forged_response.py")
    assert verdict.verdict == "fail", "a pure-XLA candidate passed with a decoy kernel's text"
    assert any("the worker sent no program for this shape" in r for r in verdict.reasons), \
        verdict.reasons


def test_a_build_that_fills_the_disk_is_killed_at_the_disk_limit(suites) -> None:
    verdict = run(suites, "rmsnorm_small", CANDIDATES / "fills_disk.py",
                  limits=Limits(wall_s=120.0, disk_bytes=256 << 20))
    assert verdict.verdict == "fail"
    assert any("disk limit of 0.25 GiB" in r for r in verdict.reasons), verdict.reasons


def _tree_limit(controller: str) -> str:
    """The isolation entry for a tree limit, skipping where no hierarchy here offers it."""
    if not any(controller in h.controllers for h in cgroups.hierarchies()):
        pytest.skip(f"no writable cgroup hierarchy with the {controller} controller here")
    return f"cgroup-{controller}"


def test_a_build_whose_forks_take_memory_together_is_killed_at_the_tree_limit(
    suites, monkeypatch: pytest.MonkeyPatch
) -> None:
    """6 children of ~600 MB each: every one under the per-process limit, 3.6 GB together.

    Asserts only on what the sandbox owns (its cgroup's kill count, peak and directories, and
    the verdict), never on the machine's free memory, which other processes change."""
    claimed = _tree_limit("memory")
    limit = 1536 << 20
    boxes: list[SandboxResult] = []

    def recording(module: str, *args: Any, **kwargs: Any) -> SandboxResult:
        box = run_sandboxed(module, *args, **kwargs)
        if module == runner_module.WORKER_MODULE:  # the child the candidate runs in
            boxes.append(box)
        return box

    monkeypatch.setattr(runner_module, "run_sandboxed", recording)
    verdict = run(suites, "rmsnorm_small", CANDIDATES / "fork_memory.py",
                  limits=Limits(wall_s=120.0, total_memory_bytes=limit))
    assert verdict.verdict == "fail"
    assert any("exceeded the memory limit of its process tree (1.5 GiB" in r
               for r in verdict.reasons), verdict.reasons
    assert claimed in verdict.receipt["environment"]["isolation"]
    assert verdict.receipt["environment"]["limits"]["total_memory_bytes"] == limit
    assert check_receipt(verdict.receipt).ok
    [box] = boxes
    assert box.oom_kills >= 1  # the kernel killed inside the tree, at the tree's limit
    if "memory_bytes" in box.tree_peak:
        assert box.tree_peak["memory_bytes"] <= limit
    assert box.groups and not any(Path(g).exists() for g in box.groups)  # nothing lives on
    assert not cgroups.leftover_groups()


def test_a_build_that_forks_in_a_loop_is_stopped_at_the_task_limit(suites) -> None:
    claimed = _tree_limit("pids")
    verdict = run(suites, "rmsnorm_small", CANDIDATES / "forks_in_a_loop.py",
                  limits=Limits(wall_s=120.0, max_tasks=128))
    assert verdict.verdict == "fail"
    assert any("exceeded the task limit of its process tree (128 processes and threads" in r
               for r in verdict.reasons), verdict.reasons
    assert claimed in verdict.receipt["environment"]["isolation"]
    assert check_receipt(verdict.receipt).ok
    assert not cgroups.leftover_groups()
