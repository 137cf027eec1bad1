"""What no single case shows, read across a candidate's cases and calls: results memoised
across calls, shapes hard-coded to the tuning point, and Python state kept between direct
calls of the built callable. Each check returns its problems; the verifier fails on any."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from tools.correctness.compare import CaseCheck, compare_case, failed_case
from tools.correctness.testsuite import FrozenSuite, SuiteCase
from tools.inputs.tasks import Task
from tools.sandbox import wire


def eager_problems(suite: FrozenSuite, judged: Mapping[str, CaseCheck],
                   results: Sequence[wire.CaseResult]) -> list[str]:
    """The built callable called directly on different inputs must answer like the traced
    program: Python state kept across calls is a wrong kernel in use. Where the traced
    program already failed a case, its failure is the reason, not kept state."""
    problems: list[str] = []
    for result in results:
        try:
            case = suite.case(result.case_id)
        except KeyError:
            problems.append(f"called directly (outside a trace), the candidate failed: "
                            f"{result.error or 'no such case'}")
            continue
        traced = judged.get(case.case_id)
        if traced is not None and not traced.passed:
            continue  # the traced program is wrong here too: that failure says why
        check = (failed_case(case, result.error) if result.error else compare_case(
            case, [a.numpy() for a in result.outputs], suite.tolerance))
        if not check.passed:
            details = [check.error] if check.error else []
            details += [*check.problems, *(p for o in check.outputs for p in o.problems)]
            problems.append(
                f"called directly (outside a trace) on {case.case_id}, the built callable "
                f"answers differently from its traced program ({'; '.join(details)[:300]}):"
                " Python state kept across calls, e.g. results cached by shape")
    return problems


def memoised(suite: FrozenSuite, response: wire.EvalResponse | None) -> list[str]:
    """Two cases of one shape with different inputs and expected outputs that returned
    identical outputs."""
    returned = {c.case_id: c for g in (response.groups if response else ()) for c in g.cases}
    by_shape: dict[int, list[SuiteCase]] = {}
    for case in suite.cases:
        by_shape.setdefault(case.shape_index, []).append(case)
    problems: list[str] = []
    for cases in by_shape.values():
        for i, a in enumerate(cases):
            for b in cases[i + 1:]:
                ra, rb = returned.get(a.case_id), returned.get(b.case_id)
                if not (ra and rb and ra.outputs and rb.outputs):
                    continue
                if a.inputs_sha256 == b.inputs_sha256 or same_arrays(a.oracle, b.oracle):
                    continue
                if same_arrays(ra.outputs, rb.outputs):
                    problems.append(
                        f"results memoised across calls: {a.case_id} and {b.case_id} have "
                        "different inputs (and different expected outputs) but returned "
                        "identical outputs")
    return problems


def hard_coded_shapes(task: Task, judged: Mapping[str, CaseCheck]) -> list[str]:
    """Correct at the tuning point but wrong or failing at every unseen shape."""
    tuning = [c for c in judged.values() if c.shape_index == 0]
    unseen = [c for c in judged.values() if c.kind == "unseen"]
    if not (tuning and unseen and all(c.passed for c in tuning)
            and not any(c.passed for c in unseen)):
        return []
    shapes = ", ".join(task.describe_shape(c.shape_index) for c in unseen)
    return [f"shapes hard-coded to the tuning point: correct at {task.describe_shape(0)} but "
            f"wrong or failing at every unseen shape ({shapes})"]


def same_arrays(a: Sequence[wire.WireArray], b: Sequence[wire.WireArray]) -> bool:
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x.numpy(), y.numpy())
        for x, y in zip(a, b, strict=True))
