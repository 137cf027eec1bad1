"""Names on the wire: subjects, streams, consumers and headers, in one place.

Commands travel on `kg.cmd.<agent>` (a work-queue stream: each command is taken by one
worker of its agent kind), or on `kg.cmd.<agent>.<route>` when the command class routes by
one of its fields (an executor command by its target: `kg.cmd.executor.tpu`). Events travel
on `kg.evt.<run_id>.<type>` (a stream the recorder consumes durably), artifacts on
`kg.art.<sha256>` (a content-addressed stream the recorder copies into the log and agents
read back by hash). The recorder answers questions about the log on `kg.log.verify`
(request-reply).
"""

from __future__ import annotations

import re

PREFIX = "kg"

COMMANDS_STREAM = "KG_CMD"
EVENTS_STREAM = "KG_EVT"
ARTIFACTS_STREAM = "KG_ART"

COMMANDS_WILDCARD = f"{PREFIX}.cmd.>"
EVENTS_WILDCARD = f"{PREFIX}.evt.>"
ARTIFACTS_WILDCARD = f"{PREFIX}.art.>"

RECORDER_EVENTS_CONSUMER = "recorder_events"
RECORDER_ARTIFACTS_CONSUMER = "recorder_artifacts"

LOG_VERIFY = f"{PREFIX}.log.verify"
"""Request-reply (core NATS): the recorder answers with the log's chain verification, the
recorded events of a run and which of the named artifacts the log lacks (`bus.logverify`)."""

MSG_ID_HEADER = "Nats-Msg-Id"
"""JetStream drops a second message with the same id inside the stream's duplicate window."""

ARTIFACT_KIND_HEADER = "Kg-Artifact-Kind"

NO_RUN_TOKEN = "_"
"""Subject token for events that belong to no run (a message nobody could decode)."""

_TOKEN = re.compile(r"[A-Za-z0-9_\-]+")
_NOT_TOKEN = re.compile(r"[^A-Za-z0-9_\-]")
_AGENT = re.compile(r"[a-z][a-z0-9_\-]*")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def check_token(value: str, what: str) -> str:
    """A subject token may not hold dots, wildcards or spaces: reject them early and by name."""
    if not _TOKEN.fullmatch(value):
        raise ValueError(f"{what}={value!r} is not a valid subject token (use letters, digits, _ and -)")
    return value


def check_agent(agent: str) -> str:
    if not _AGENT.fullmatch(agent):
        raise ValueError(f"agent={agent!r}: agent names are lower case letters, digits, _ and -")
    return agent


def route_token(route: str) -> str:
    """The subject token of a route value (a target name), odd characters replaced like a run's.

    Routing only: the command carries the exact value, and the worker that takes it checks it.
    """
    return run_token(route)


def command_subject(agent: str, route: str | None = None) -> str:
    """`kg.cmd.<agent>`, or `kg.cmd.<agent>.<route>` for a routed command."""
    base = f"{PREFIX}.cmd.{check_agent(agent)}"
    return base if route is None else f"{base}.{route_token(route)}"


def run_token(run_id: str) -> str:
    """The subject token of a run: the run id, with characters a subject cannot hold replaced.

    Routing only: the exact run id travels inside the event, so a rare collision of two
    odd run ids on one token costs a subscriber a filter, never a wrong record.
    """
    if not run_id:
        return NO_RUN_TOKEN
    return run_id if _TOKEN.fullmatch(run_id) else _NOT_TOKEN.sub("_", run_id)


def event_subject(run_id: str, type_name: str) -> str:
    return f"{PREFIX}.evt.{run_token(run_id)}.{check_token(type_name, 'type')}"


def run_events_subject(run_id: str) -> str:
    """Every event of one run, for a caller that waits on results."""
    return f"{PREFIX}.evt.{run_token(run_id)}.>"


def artifact_subject(sha256: str) -> str:
    if not _SHA256.fullmatch(sha256):
        raise ValueError(f"sha256={sha256!r} is not a lower-case hex sha256 digest")
    return f"{PREFIX}.art.{sha256}"


def agent_consumer(agent: str, route: str | None = None) -> str:
    """The durable pull consumer that every worker of one agent kind shares (its queue group);
    with a route, the one that every worker taking that route shares (`agent_executor-tpu`).

    An agent's `-` becomes `_` and a route keeps its `-`, so no agent's consumer is another's route.
    """
    name = f"agent_{check_agent(agent)}".replace("-", "_")
    return name if route is None else f"{name}-{route_token(route)}"
