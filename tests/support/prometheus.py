"""A real Prometheus for the tests: Debian's ``prometheus`` binary on a free 127.0.0.1 port,
with a throwaway config and data directory, queried through its HTTP API.

``make install`` installs the binaries (``prometheus``, ``promtool``) when they are missing;
a test that needs them fails with that fix instead of skipping.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

HOW_TO_INSTALL = (
    "Prometheus is not installed: run `make install` (as root it installs Debian's "
    "`prometheus` package), or `sudo apt-get install -y --no-install-recommends prometheus`"
)


def binary(name: str) -> str:
    """The path of ``prometheus`` or ``promtool``; AssertionError with the fix if missing."""
    path = shutil.which(name)
    if path is None:
        raise AssertionError(f"{name} not found on PATH. {HOW_TO_INSTALL}")
    return path


class PrometheusError(AssertionError):
    """Prometheus answered a query with an error (a bad PromQL expression, say)."""


class PrometheusProcess:
    """``prometheus`` scraping ``jobs`` (job name -> host:port targets) every
    ``scrape_interval_s``, evaluating ``rule_files`` (if any) as often."""

    def __init__(
        self,
        workdir: Path,
        port: int,
        jobs: dict[str, list[str]],
        rule_files: list[Path] | None = None,
        scrape_interval_s: float = 1.0,
    ) -> None:
        self.workdir = workdir
        self.port = port
        self.jobs = jobs
        self.rule_files = list(rule_files or [])
        self.scrape_interval_s = scrape_interval_s
        self.log_path = workdir / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def config(self) -> dict[str, Any]:
        interval = f"{int(self.scrape_interval_s * 1000)}ms"
        return {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": [str(p) for p in self.rule_files],
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": targets}]}
                for job, targets in self.jobs.items()
            ],
        }

    def start(self, timeout_s: float = 30.0) -> PrometheusProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        log = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the process' life
        self.proc = subprocess.Popen(
            [
                binary("prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited at start:\n{self.log_tail()}")
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r,
            ):
                if r.status == 200:
                    return self
            time.sleep(0.2)
        raise AssertionError(f"prometheus not ready within {timeout_s:.0f} s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def log_tail(self, n: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        return ""

    def api(self, path: str, **params: str | list[str]) -> Any:
        """GET /api/v1/<path>; the ``data`` of a success, PrometheusError otherwise."""
        query = urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read() or b"{}")
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query: [{"metric": {labels}, "value": float}, ...] (vectors and scalars)."""
        data = self.api("query", query=expr)
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": float(data["result"][1])}]
        if data["resultType"] != "vector":
            raise PrometheusError(f"{expr}: a {data['resultType']}, not an instant vector")
        return [{"metric": r["metric"], "value": float(r["value"][1])} for r in data["result"]]

    def targets_up(self) -> dict[str, str]:
        """job -> health of its (single) target, as Prometheus last scraped it."""
        data = self.api("targets")
        return {t["labels"]["job"]: t["health"] for t in data["activeTargets"]}
