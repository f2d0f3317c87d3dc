"""A real Jaeger for the tests: the binary ``make test`` builds from Jaeger's Go module
(``make jaeger-tools``: deploy/local/jaeger.sh), run with deploy/local/jaeger.yaml on free
127.0.0.1 ports, traces kept in memory.

A test that needs it and finds it missing fails with the fix (``make jaeger-tools``) instead of
skipping.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "local" / "jaeger.sh"
CONFIG = ROOT / "deploy" / "local" / "jaeger.yaml"


def binary() -> Path:
    """The Jaeger binary; AssertionError with the fix when it is not built."""
    got = subprocess.run([str(SCRIPT), "path"], capture_output=True, text=True, check=False)
    if got.returncode != 0:
        raise AssertionError(
            got.stderr.strip() or "jaeger is not built: run make jaeger-tools (make test does)"
        )
    return Path(got.stdout.strip())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Jaeger:
    otlp_endpoint: str  # OTEL_EXPORTER_OTLP_ENDPOINT for lagpilot's processes
    query_url: str  # the query API and UI

    def traces(self, service: str, tags: dict[str, str]) -> list[dict[str, Any]]:
        """Jaeger's ``/api/traces`` for ``service``'s spans with every one of ``tags``: each
        trace whole (every span of it, from every service), as the UI's search finds it."""
        query = urllib.parse.urlencode({"service": service, "tags": orjson.dumps(tags).decode(),
                                        "lookback": "1h", "limit": 20})  # fmt: skip
        with urllib.request.urlopen(f"{self.query_url}/api/traces?{query}", timeout=10) as r:
            return list(orjson.loads(r.read())["data"] or [])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def jaeger_server() -> Iterator[Jaeger]:
    """Start Jaeger, yield its addresses once it is healthy, stop it at the end."""
    ports = {k: _free_port() for k in ("JAEGER_OTLP_HTTP", "JAEGER_QUERY_HTTP",
                                       "JAEGER_QUERY_GRPC", "JAEGER_HEALTH")}  # fmt: skip
    env = {**os.environ, **{k: f"127.0.0.1:{p}" for k, p in ports.items()}}
    with tempfile.TemporaryDirectory(prefix="lagpilot-jaeger-") as tmp:
        log = Path(tmp) / "jaeger.log"
        with log.open("wb") as out:
            proc = subprocess.Popen([str(binary()), "--config", str(CONFIG)], env=env,
                                    stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
        try:
            health = f"http://127.0.0.1:{ports['JAEGER_HEALTH']}/status"
            deadline = time.monotonic() + 60
            while not _healthy(health):
                assert proc.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.2)
            yield Jaeger(f"http://127.0.0.1:{ports['JAEGER_OTLP_HTTP']}",
                         f"http://127.0.0.1:{ports['JAEGER_QUERY_HTTP']}")  # fmt: skip
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
