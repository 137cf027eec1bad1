from __future__ import annotations

import msgspec
import pytest

from eventstore.codec import EventDecodeError, decode_event, encode_event
from eventstore.events import (
    EVENT_TYPES,
    EVENT_TYPES_BY_NAME,
    NodeEvaluated,
    RunRequested,
    TestsRun,
    current_version,
    event_id_time,
    new_event_id,
)
from eventstore.synthetic import synthetic_log
from eventstore.upcasting import UpcastError, unregister, upcaster


def test_event_ids_sort_by_time_and_never_repeat() -> None:
    ids = [new_event_id() for _ in range(20_000)]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    assert all(len(i) == 26 for i in ids)
    assert abs(event_id_time(ids[-1]) - event_id_time(ids[0])) < 5


def test_every_type_has_a_stable_unique_tag() -> None:
    tags = [cls.__struct_config__.tag for cls in EVENT_TYPES]
    assert len(tags) == len(set(tags))
    assert set(EVENT_TYPES_BY_NAME) == set(tags)
    # The tag is declared, not derived from the module path.
    assert all("." not in t for t in tags)
    assert RunRequested.__struct_config__.tag == "RunRequested"


def test_events_are_frozen() -> None:
    event = TestsRun.create(run_id="r", producer="t@1", code_sha256="c", suite_sha256="s",
                            passed=True, n_cases=1)
    with pytest.raises(AttributeError):
        event.passed = False  # type: ignore[misc]


def test_synthetic_events_round_trip_through_the_codec() -> None:
    events = list(synthetic_log(3_000, seed=7))
    assert {e.type_name for e in events} >= {"RunRequested", "NodeEvaluated", "RunFinished",
                                             "LlmCalled", "FixAttempted"}
    bodies = [encode_event(e) for e in events]
    assert [decode_event(b) for b in bodies] == events
    assert [decode_event(b.decode()) for b in bodies] == events


def test_garbage_and_unknown_types_are_refused_clearly() -> None:
    with pytest.raises(EventDecodeError, match="not a JSON event"):
        decode_event(b"{not json")
    with pytest.raises(EventDecodeError, match="unknown event type 'Nope'"):
        decode_event(b'{"type": "Nope", "event_id": "x"}')
    with pytest.raises(EventDecodeError, match="no 'type'"):
        decode_event(b"[1, 2]")


def _old_tests_run_body() -> dict:
    body = msgspec.to_builtins(
        TestsRun.create(run_id="r", producer="t@1", code_sha256="c", suite_sha256="s",
                        passed=True, n_cases=4)
    )
    body["ok"] = body.pop("passed")  # how v0 spelt it
    body["v"] = 0
    return body


def test_an_old_event_is_upcast_on_the_way_out() -> None:
    @upcaster("TestsRun", from_version=0)
    def _rename_ok(body: dict) -> dict:
        body["passed"] = body.pop("ok")
        return body

    try:
        old = msgspec.json.encode(_old_tests_run_body())
        event = decode_event(old)
        assert isinstance(event, TestsRun)
        assert event.passed is True
        assert event.v == current_version("TestsRun")
    finally:
        unregister("TestsRun", from_version=0)


def test_an_old_event_without_an_upcaster_is_an_error_not_a_guess() -> None:
    with pytest.raises(EventDecodeError, match="no upcaster for TestsRun from v0"):
        decode_event(msgspec.json.encode(_old_tests_run_body()))


def test_an_event_from_a_newer_schema_is_refused() -> None:
    body = msgspec.to_builtins(
        NodeEvaluated.create(run_id="r", producer="o@1", node_id="n1", valid=True, compiled=True)
    )
    body["v"] = 99
    with pytest.raises(EventDecodeError, match="newer than this kernelgraph"):
        decode_event(msgspec.json.encode(body))


def test_upcaster_registry_refuses_a_second_step_for_the_same_version() -> None:
    def a(body: dict) -> dict:
        return body

    def b(body: dict) -> dict:
        return body

    upcaster("RunFinished", from_version=0)(a)
    try:
        with pytest.raises(ValueError, match="already registered"):
            upcaster("RunFinished", from_version=0)(b)
    finally:
        unregister("RunFinished", from_version=0)
    assert issubclass(UpcastError, ValueError)
