"""The Dockerfile, read as text (no Docker engine here): a pinned slim Python 3.11 base, a
non-root user, every dependency pinned inside pyproject's ranges, one image whose entrypoint
is ``lagpilot``, and only files that exist and that .dockerignore lets through."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
from dataclasses import dataclass

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from actuators.settings import Settings as ActuatorSettings
from pipeline.settings import Settings as PipelineSettings
from tests.unit.deploy.facts import PYPROJECT, ROOT

LOCK = ROOT / "deploy" / "docker" / "requirements.lock"


@dataclass(frozen=True)
class Instruction:
    op: str
    args: str
    stage: int


def parse(text: str) -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped; stage = FROM count."""
    out: list[Instruction] = []
    stage = -1
    logical = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not logical and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        logical += line
        op, _, args = logical.partition(" ")
        if op.upper() == "FROM":
            stage += 1
        out.append(Instruction(op.upper(), args.strip(), stage))
        logical = ""
    return out


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    return parse((ROOT / "Dockerfile").read_text())


def _final(instructions: list[Instruction]) -> list[Instruction]:
    last = max(i.stage for i in instructions)
    return [i for i in instructions if i.stage == last]


def test_every_base_is_a_pinned_slim_python_311(instructions: list[Instruction]) -> None:
    bases = [i.args.split()[0] for i in instructions if i.op == "FROM"]
    assert bases
    for image in bases:
        assert re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?", image), image


def test_runs_as_a_fixed_non_root_user(instructions: list[Instruction]) -> None:
    users = [i.args for i in _final(instructions) if i.op == "USER"]
    assert users, "the final stage sets USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) >= 1000, "a numeric uid, so runAsNonRoot can verify it"
    k8s = (ROOT / "deploy" / "k8s" / "pipeline.yaml").read_text()
    assert f"runAsUser: {uid}" in k8s


def test_one_image_whose_entrypoint_is_lagpilot(instructions: list[Instruction]) -> None:
    entry = [i.args for i in _final(instructions) if i.op == "ENTRYPOINT"]
    assert entry and json.loads(entry[-1]) == ["lagpilot"], "exec form, no shell"
    assert PYPROJECT["project"]["scripts"]["lagpilot"] == "pipeline.commands.cli:main"
    from pipeline.commands.cli import COMMANDS

    assert {"run", "actuate", "status", "control", "scaler"} <= set(COMMANDS)


def test_exposes_every_process_port(instructions: list[Instruction]) -> None:
    from pipeline.serve.keda.server import DEFAULT_METRICS_PORT, DEFAULT_PORT

    exposed = {int(p) for i in _final(instructions) if i.op == "EXPOSE" for p in i.args.split()}
    assert exposed == {
        PipelineSettings().metrics_port,
        ActuatorSettings().metrics_port,
        DEFAULT_METRICS_PORT,  # the KEDA scaler's health and metrics
        DEFAULT_PORT,  # its gRPC
    }


def _dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


def _ignored(path: str, patterns: list[str]) -> bool:
    for pat in patterns:
        p = pat.removeprefix("**/")
        if fnmatch.fnmatch(path, pat) or path == pat or path.startswith(pat + "/"):
            return True
        if pat.startswith("**/") and any(fnmatch.fnmatch(part, p) for part in path.split("/")):
            return True
    return False


def test_every_copied_path_exists_and_is_in_the_context(instructions: list[Instruction]) -> None:
    ignore = _dockerignore()
    copies = [i for i in instructions if i.op in {"COPY", "ADD"} and "--from=" not in i.args]
    assert copies
    for c in copies:
        words = [w for w in shlex.split(c.args) if not w.startswith("--")]
        for src in words[:-1]:
            assert (ROOT / src).exists(), f"COPY {src}: no such path in the repository"
            assert not _ignored(src, ignore), f"COPY {src}: excluded by .dockerignore"


def test_dockerignore_keeps_local_state_and_secrets_out() -> None:
    ignore = _dockerignore()
    for path in [".git", ".venv", "deploy/local/.cache", "state", "tests", "x/signing.key"]:
        assert _ignored(path, ignore), path


def test_dependencies_install_from_the_lock_wheels_only(instructions: list[Instruction]) -> None:
    runs = " ".join(i.args for i in instructions if i.op == "RUN")
    assert re.search(r"--only-binary=:all: -r /src/requirements\.lock", runs)
    assert "--no-deps /wheels/lagpilot-" in runs, "the project itself adds no unpinned deps"
    assert re.search(r"pip install pip==\d", runs), "pip itself pinned"


def _lock() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in LOCK.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep and re.fullmatch(r"[\w.\-+]+", version), f"not pinned with ==: {line}"
        pins[canonicalize_name(name)] = version
    return pins


def test_lock_pins_every_dependency_inside_pyproject_range() -> None:
    pins = _lock()
    for spec in PYPROJECT["project"]["dependencies"]:
        req = Requirement(spec)
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is a dependency but not pinned in {LOCK.name}"
        assert req.specifier.contains(pins[name]), f"{name}=={pins[name]} is outside {spec}"
    dev = {
        canonicalize_name(Requirement(s).name)
        for s in PYPROJECT["project"]["optional-dependencies"]["dev"]
    }
    assert not dev & set(pins), f"dev-only packages in the runtime image: {dev & set(pins)}"
