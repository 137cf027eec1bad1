"""`kernelgraph policies`: the search policies `--policy` finds, with their parameters."""

from __future__ import annotations

import inspect
import sys
from typing import Annotated, Any

import typer

from kernelgraph.cli.app import app, emit_json, fail


@app.command("policies")
def policies(
    json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of text.")] = False,
) -> None:
    """List the search policies `--policy NAME` accepts (built-in and installed plug-ins), each with the parameters `--param key=value` sets, their types, defaults and meaning."""
    from searchpolicies.errors import PolicyError
    from searchpolicies.registry import BUILTIN, policy_class, policy_names

    rows: list[dict[str, Any]] = []
    for name in policy_names():
        try:
            cls = policy_class(name)
        except PolicyError as exc:  # a broken plug-in is listed with its reason
            rows.append({"name": name, "builtin": name in BUILTIN, "error": str(exc)})
            continue
        doc = inspect.getdoc(cls) or ""
        rows.append({"name": name, "builtin": name in BUILTIN,
                     "summary": doc.splitlines()[0] if doc else "",
                     "parameters": [{"name": p.name, "type": p.type.__name__,
                                     "default": p.default, "help": p.help}
                                    for p in cls.parameters]})
    if not rows:
        fail("no search policy is installed")
    if json:
        emit_json({"policies": rows})
        return
    out = sys.stdout
    for row in rows:
        origin = "built-in" if row["builtin"] else "plug-in"
        if "error" in row:
            out.write(f"{row['name']} ({origin}): cannot be loaded: {row['error']}\n\n")
            continue
        out.write(f"{row['name']} ({origin}): {row['summary']}\n")
        for p in row["parameters"]:
            setting = f"{p['name']}={p['default']}"
            out.write(f"  --param {setting:<18} {p['type']:<5} {p['help']}\n")
        out.write("\n")
