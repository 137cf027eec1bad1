"""Task loading, candidate reading, the frozen suite, comparison, audit and receipts.

All in-process and quick: nothing here runs candidate code (the audit tests lower trusted
functions written in the test itself).
"""

from __future__ import annotations

import hashlib
import json
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl

from tools.correctness.compare import compare_case
from tools.correctness.testsuite import FrozenSuite, SuiteError, VacuousSuite, build_suite
from tools.inputs.candidate import CandidateError, read_candidate
from tools.inputs.tasks import DEFAULT_TOLERANCE, TaskError, load_task
from tools.lowered.audit import audit_text, embedded_constant_bytes
from tools.sandbox.launcher import scrubbed_env
from tools.sandbox.wire import WireArray
from tools.verification.receipts import check_receipt, seal

ROOT = Path(__file__).resolve().parent.parent
EVALTASKS = ROOT / "tests" / "evaltasks"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


GOOD_TASK = """
import jax, jax.numpy as jnp
NAME = "double"
SHAPES = [(64, 128), (24, 256)]
def reference(x):
    return x * 2.0
def make_inputs(key, shape_index=0):
    return (jax.random.normal(key, SHAPES[shape_index], jnp.float32),)
"""


# ---------------------------------------------------------------------------- tasks


@pytest.mark.parametrize("name", ["rmsnorm", "gelu", "matmul", "softmax"])
def test_shipped_tasks_load_with_unseen_shapes(name: str) -> None:
    task = load_task(ROOT / "tasks" / f"{name}.py")
    assert task.name == name
    assert task.format == "kernelgraph"
    assert len(task.unseen_shape_indices) >= 2
    assert task.tolerance == DEFAULT_TOLERANCE
    assert len(task.source_sha256) == 64


def test_good_task_inputs_are_deterministic_and_seeded(tmp_path: Path) -> None:
    task = load_task(write(tmp_path, "double.py", GOOD_TASK))
    a0, = task.make_inputs(0, 0)
    b0, = task.make_inputs(0, 0)
    a1, = task.make_inputs(1, 0)
    assert np.array_equal(a0, b0) and not np.array_equal(a0, a1)
    assert task.make_inputs(0, 1)[0].shape == (24, 256)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("def reference(x):\n    return x\n", "missing function `make_inputs`"),
        ("def reference(x:\n", "syntax error at line 1"),
        ("import jax\ndef reference(x):\n    return [1]\n"
         "def make_inputs(key, shape_index=0):\n    return jax.random.normal(key, (8,))\n",
         "non-JAX output"),
        ("import jax, time\ndef reference(x):\n    return x * 2\n"
         "def make_inputs(key, shape_index=0):\n"
         "    return jax.random.normal(jax.random.key(time.perf_counter_ns()), (8,))\n",
         "not deterministic"),
        ("import numpy as np\ndef reference(x):\n    return np.asarray(x) * 2\n"
         "def make_inputs(key, shape_index=0):\n    return np.ones((4,), np.float32)\n",
         "expected a JAX array"),
        ("import nonexistent_module_xyz\n", "importing raised ModuleNotFoundError"),
        ("import jax\nTOLERANCE = {'atol': -1}\ndef reference(x):\n    return x\n"
         "def make_inputs(key, shape_index=0):\n    return jax.random.normal(key, (8,))\n",
         "TOLERANCE"),
        ("CONFIG = {'n': 64}\ndef workload(x):\n    return x\n",
         "JAXBench baseline is missing `create_inputs`"),
    ],
)
def test_task_errors_name_the_file_and_problem(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, "bad_task.py", text)
    with pytest.raises(TaskError) as info:
        load_task(path)
    message = str(info.value)
    assert str(path) in message
    assert expected in message


JAXBENCH = """
import jax
import jax.numpy as jnp

CONFIG = {'name': 'tiny_rmsnorm', 'batch': 2, 'seq_len': 64, 'emb_dim': 256, 'epsilon': 1e-5}

def create_inputs(dtype=jnp.float32):
    key = jax.random.PRNGKey(42)
    k1, k2 = jax.random.split(key, 2)
    B, S, D = CONFIG['batch'], CONFIG['seq_len'], CONFIG['emb_dim']
    x = jax.random.normal(k1, (B, S, D), dtype=dtype)
    scale = jax.random.normal(k2, (D,), dtype=dtype) * 0.1 + 1.0
    return x, scale

def workload(x, scale):
    mean2 = jnp.mean(jnp.square(x), axis=-1, keepdims=True)
    return x * jax.lax.rsqrt(mean2 + CONFIG['epsilon']) * scale

def get_flops():
    return 5 * CONFIG['batch'] * CONFIG['seq_len'] * CONFIG['emb_dim']
"""


def test_jaxbench_baseline_loads_natively_with_scaled_shapes_and_seeds(tmp_path: Path) -> None:
    path = write(tmp_path, "baseline.py", JAXBENCH)
    task = load_task(path)
    assert task.format == "jaxbench" and task.name == "tiny_rmsnorm"
    declared = task.shapes[:3]  # then the unaligned patterns the scaled ones lack
    assert [s["seq_len"] for s in declared] == [64, 48, 32]
    assert [s["emb_dim"] for s in declared] == [256, 192, 128]
    assert task.derived_shapes == tuple(range(3, len(task.shapes)))
    x0, _ = task.make_inputs(0, 0)
    own, _ = task.module.create_inputs()  # seed 0 is the file's own inputs
    assert np.array_equal(x0, own)
    x1, _ = task.make_inputs(1, 0)
    assert not np.array_equal(x0, x1)
    assert task.make_inputs(0, 1)[0].shape == (2, 48, 192)
    assert task.flops(1, task.make_inputs(0, 1)) == 5 * 2 * 48 * 192
    assert task.module.CONFIG["seq_len"] == 64  # restored after use
    out = task.reference_at(2)(*task.make_inputs(0, 2))
    assert out.shape == (2, 32, 128)


# --------------------------------------------------------------------------- suite


def test_suite_is_deterministic_hashed_and_round_trips() -> None:
    task = load_task(EVALTASKS / "rmsnorm_small.py")
    suite = build_suite(task, seeds=(0, 1))
    again = build_suite(task, seeds=(0, 1))
    assert suite.sha256 == again.sha256
    kinds = [c.kind for c in suite.cases]
    # two declared unseen shapes and three derived off the (8, 128) tile (all declared
    # aligned): rows alone, columns alone, both; one case with NaN and inf in its inputs
    assert kinds.count("seed") == 2 and kinds.count("unseen") == 5
    assert kinds.count("nonfinite") == 1
    assert task.derived_shapes == (3, 4, 5)
    assert sum("derived off the (8, 128) tile" in n for n in suite.notes) == 3
    assert {"probe-large", "probe-small"} <= set(kinds)
    assert all(f > 0 for c in suite.cases for f in c.floor_max_abs)
    assert all(wa.dtype == "float64" for c in suite.cases for wa in c.oracle)
    data = suite.to_bytes()
    assert FrozenSuite.from_bytes(data).sha256 == suite.sha256
    altered = bytearray(data)
    altered[len(altered) // 2] ^= 0xFF
    with pytest.raises(SuiteError, match="altered"):
        FrozenSuite.from_bytes(bytes(altered))
    assert not jax.config.read("jax_enable_x64")  # x64 was scoped to the oracle


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("return jnp.zeros_like(x)", "all zero"),
        ("return jnp.ones_like(x) * 3.0", "constant"),
        ("return x * 2.0", "does not change when input 1 is perturbed"),
    ],
)
def test_vacuous_suites_are_refused(tmp_path: Path, body: str, expected: str) -> None:
    text = f"""
import jax, jax.numpy as jnp
SHAPES = [(16, 128)]
def reference(x, w):
    {body}
def make_inputs(key, shape_index=0):
    kx, kw = jax.random.split(key)
    return jax.random.normal(kx, (16, 128)), jax.random.normal(kw, (128,))
"""
    task = load_task(write(tmp_path, "vacuous.py", text))
    with pytest.raises(VacuousSuite, match=expected):
        build_suite(task, seeds=(0, 1))


# ----------------------------------------------------------------------- compare


def _suite_case(oracle: np.ndarray, floor: float, dtype: str = "float32"):
    from tools.correctness.testsuite import SuiteCase

    return SuiteCase(
        case_id="c", shape_index=0, seed=0, kind="seed", inputs=(), inputs_sha256="",
        oracle=(WireArray.of(oracle.astype(np.float64)),), out_dtypes=(dtype,),
        out_shapes=(oracle.shape,), floor_max_abs=(floor,), floor_mean_abs=(floor / 10,),
        ceiling_applies=(True,),
    )


def test_compare_holds_candidates_to_twice_the_floor() -> None:
    oracle = np.linspace(-2, 2, 1024).reshape(8, 128)
    case = _suite_case(oracle, floor=1e-6)
    exact = compare_case(case, [oracle.astype(np.float32)], DEFAULT_TOLERANCE)
    assert exact.passed
    sloppy = compare_case(case, [(oracle + 1e-4).astype(np.float32)], DEFAULT_TOLERANCE)
    assert not sloppy.passed
    assert any("max-abs error" in p for p in sloppy.outputs[0].problems)
    poisoned = oracle.astype(np.float32).copy()
    poisoned[0, 0] = np.inf
    bad = compare_case(case, [poisoned], DEFAULT_TOLERANCE)
    assert bad.outputs[0].nonfinite == 1 and not bad.passed
    wrong_dtype = compare_case(case, [oracle.astype(np.float16)], DEFAULT_TOLERANCE)
    assert not wrong_dtype.passed
    wrong_shape = compare_case(case, [oracle[:4].astype(np.float32)], DEFAULT_TOLERANCE)
    assert not wrong_shape.passed


# ------------------------------------------------------------------------- audit


def _lowered(fn, *args) -> str:
    return jax.jit(fn).trace(*args).lower(lowering_platforms=("tpu",)).as_text()


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def _double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def test_audit_rejects_no_kernel_and_math_around_a_copy_kernel() -> None:
    x = jnp.ones((16, 128), jnp.float32)
    assert "no Pallas kernel" in audit_text(_lowered(lambda v: v * 2.0, x)).problems[0]

    def copy_after_math(v):
        y = jnp.exp(v) * 2.0
        return pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(y.shape, y.dtype))(y)

    report = audit_text(_lowered(copy_after_math, x))
    assert not report.ok
    assert "math runs in XLA outside the Pallas kernel" in report.problems[0]
    assert "stablehlo.exponential" in report.problems[0]

    def layout_only(v):
        y = pl.pallas_call(_double, out_shape=jax.ShapeDtypeStruct(v.shape, v.dtype))(v)
        return y.reshape(8, 256).T

    assert audit_text(_lowered(layout_only, x)).ok


def test_audit_rejects_embedded_answer_tables() -> None:
    table = np.arange(128 * 256, dtype=np.float32).reshape(128, 256)

    def with_table(v):
        y = jnp.asarray(table)
        return pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(y.shape, y.dtype))(y)

    text = _lowered(with_table, jnp.ones((128, 256), jnp.float32))
    assert embedded_constant_bytes(text) == table.nbytes
    assert any("non-uniform constants" in p for p in audit_text(text).problems)


# --------------------------------------------------------------------- candidate


def test_candidate_is_read_statically_never_imported() -> None:
    allclose = np.allclose
    source = read_candidate(ROOT / "tests" / "candidates" / "monkeypatch_compare.py")
    assert np.allclose is allclose  # its import-time patching did not run here
    assert source.tunables == {}
    matmul = read_candidate(ROOT / "kernels" / "matmul.py")
    assert matmul.default_config == {"block_m": 256, "block_n": 256, "block_k": 256}
    assert matmul.num_configs == 12
    assert next(matmul.configs()) == matmul.default_config
    assert matmul.sha256 == hashlib.sha256((ROOT / "kernels" / "matmul.py").read_bytes()).hexdigest()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("def build(:\n", "syntax error"),
        ("TUNABLES = {}\n", "missing function `build`"),
        ("import os\nTUNABLES = {'b': [os.cpu_count()]}\ndef build(b=1):\n    pass\n",
         "literal dict"),
        ("TUNABLES = {'b': [1]}\ndef build(a=1):\n    pass\n", "no parameter of that name"),
        ("TUNABLES = {'b': []}\ndef build(b=1):\n    pass\n", "non-empty list"),
        ("def build(b):\n    pass\n", "need defaults"),
    ],
)
def test_candidate_errors(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, "cand.py", text)
    with pytest.raises(CandidateError, match=expected) as info:
        read_candidate(path)
    assert str(path) in str(info.value)


# ------------------------------------------------------------------ env, receipts


def test_scrubbed_env_drops_credentials() -> None:
    env = scrubbed_env({
        "PATH": "/usr/bin", "GEMINI_API_KEY": "x", "JAX_PLATFORMS": "cpu", "NATS_URL": "n",
        "GOOGLE_APPLICATION_CREDENTIALS": "g", "JAX_SECRET_TOKEN": "t", "HOME": "/root",
        "AWS_SECRET_ACCESS_KEY": "a", "XLA_FLAGS": "--xla_dump_to=/tmp", "MY_PASSWORD": "p",
        "JAX_COMPILATION_CACHE_DIR": "/c", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_ENABLE_COMPILATION_CACHE": "true", "KG_XLA_CACHE": "/k",
    })
    # JAX's compilation cache is code the trusted processes load: a child never gets one
    assert env == {"PATH": "/usr/bin", "JAX_PLATFORMS": "cpu",
                   "XLA_FLAGS": "--xla_dump_to=/tmp", "JAX_ENABLE_COMPILATION_CACHE": "false"}


def test_receipt_hash_and_verdict_are_rechecked() -> None:
    from tools.verification.receipts import RECEIPT_KIND, Checks

    oracle = np.linspace(-1, 1, 256).reshape(2, 128)
    case = compare_case(_suite_case(oracle, 1e-6), [oracle.astype(np.float32)], DEFAULT_TOLERANCE)
    checks = Checks(candidate_loaded=True, sandbox_ok=True, compile_ok=True, audit_ok=True,
                    tampering=(), inputs_unmodified=True, inputs_as_sent=True, races_in=(),
                    consistency_problems=(), timing_valid=True, floor_factor=2.0,
                    tolerance=dict(DEFAULT_TOLERANCE), cases=(case,))
    measurement = {"measured_on": "simulated", "speedup": 2.0, "latency_s": 1e-6,
                   "baseline_s": 2e-6, "valid": True}
    receipt = seal({"kind": RECEIPT_KIND, "verdict": "pass", "checks": checks,
                    "measurement": measurement})
    assert check_receipt(receipt).ok
    edited = json.loads(json.dumps(receipt))
    edited["checks"]["cases"][0]["outputs"][0]["max_abs"] = 1.0
    result = check_receipt(edited)
    assert not result.hash_ok and not result.verdict_ok
    resealed = seal({k: v for k, v in edited.items() if k != "sha256"})
    result = check_receipt(resealed)  # hash fixed up, but the verdict no longer follows
    assert result.hash_ok and not result.verdict_ok and result.derived_verdict == "fail"
