"""The worker's integrity guard names a replaced evaluation function, including the shared
jaxpr loop the interpret-mode run goes through (`tools.jaxpreval`)."""

from __future__ import annotations

import pytest

from tools import jaxpreval
from tools.child import interpret
from tools.child.guard import GUARDED, IntegrityGuard, _resolve


def test_the_evaluation_loop_is_guarded_and_resolves() -> None:
    for name in ("tools.jaxpreval.evaluate", "tools.jaxpreval.inner",
                 "tools.child.interpret._eval"):
        assert name in GUARDED and callable(_resolve(name))
    assert IntegrityGuard().changed() == []


@pytest.mark.parametrize(("module", "name"), [(jaxpreval, "evaluate"), (jaxpreval, "inner"),
                                              (interpret, "_eval")])
def test_a_replaced_evaluation_function_is_named(module: object, name: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    guard = IntegrityGuard()
    monkeypatch.setattr(module, name, lambda *a, **k: [])
    assert f"{module.__name__}.{name}" in guard.changed()
