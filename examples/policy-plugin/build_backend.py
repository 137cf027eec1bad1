"""A standard-library-only PEP 517 backend, so this example builds with nothing installed.

A real plug-in would normally name setuptools or hatchling in `[build-system]`; this one
carries its own backend so that `pip install --no-build-isolation` works offline in any
environment that has kernelgraph, even one without the `wheel` package. It packs the
packages listed in `[tool.example-backend]` and the `[project]` metadata, entry points
included, into a pure-Python wheel.
"""

from __future__ import annotations

import base64
import hashlib
import re
import tomllib
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _project() -> tuple[dict, list[str]]:
    data = tomllib.loads((HERE / "pyproject.toml").read_text())
    return data["project"], data["tool"]["example-backend"]["packages"]


def _dist_name() -> str:
    project, _ = _project()
    return f"{re.sub(r'[-_.]+', '_', project['name'])}-{project['version']}"


def _metadata_files() -> dict[str, str]:
    project, _ = _project()
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {project['version']}",
             f"Summary: {project.get('description', '')}",
             f"Requires-Python: {project.get('requires-python', '>=3')}"]
    lines += [f"Requires-Dist: {d}" for d in project.get("dependencies", [])]
    entry_points = "".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in items.items()) + "\n"
        for group, items in project.get("entry-points", {}).items())
    wheel = "Wheel-Version: 1.0\nGenerator: build_backend.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    return {"METADATA": "\n".join(lines) + "\n", "WHEEL": wheel, "entry_points.txt": entry_points}


def get_requires_for_build_wheel(config_settings: dict | None = None) -> list[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str,
                                     config_settings: dict | None = None) -> str:
    dist_info = Path(metadata_directory) / f"{_dist_name()}.dist-info"
    dist_info.mkdir(parents=True, exist_ok=True)
    for name, text in _metadata_files().items():
        (dist_info / name).write_text(text)
    return dist_info.name


def build_wheel(wheel_directory: str, config_settings: dict | None = None,
                metadata_directory: str | None = None) -> str:
    _, packages = _project()
    files: dict[str, bytes] = {}
    for package in packages:
        for path in sorted((HERE / package).rglob("*.py")):
            files[path.relative_to(HERE).as_posix()] = path.read_bytes()
    dist_info = f"{_dist_name()}.dist-info"
    for name, text in _metadata_files().items():
        files[f"{dist_info}/{name}"] = text.encode()
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel_name = f"{_dist_name()}-py3-none-any.whl"
    with zipfile.ZipFile(Path(wheel_directory) / wheel_name, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return wheel_name
