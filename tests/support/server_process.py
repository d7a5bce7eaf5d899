"""A real ``tierlog serve`` subprocess on 127.0.0.1 for the protocol tests.

``start(tmp_path, config)`` runs the server on an ephemeral port and returns once it accepts
connections (it waits for the ``--port-file`` the server writes when bound, failing fast if the
process exits). ``restart()`` reuses the same port so clients keep their bootstrap address;
``kill()`` is a SIGKILL (no clean shutdown), ``terminate()`` a SIGTERM (clean shutdown marker).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Self

#: How long a start or a stop may take before the test fails.
TIMEOUT_S = 60.0


class ServerProcess:
    """Handle on one ``tierlog serve`` process (and its restarts on the same data dir)."""

    def __init__(self, tmp_path: Path, config: Mapping[str, Any] | None = None,
                 data_dir: Path | None = None, args: Sequence[str] = ()) -> None:
        self.tmp_path = Path(tmp_path)
        self.data_dir = Path(data_dir) if data_dir is not None else self.tmp_path / "data"
        self.config = {str(k): str(v) for k, v in (config or {}).items()}
        #: More ``tierlog serve`` options (``--metrics-port 0``, ...).
        self.args = list(args)
        self.port = 0
        self.host = "127.0.0.1"
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0
        self.log_path = self.tmp_path / "server-0.log"

    @property
    def bootstrap(self) -> str:
        """``host:port`` for a client's bootstrap.servers."""
        return f"{self.host}:{self.port}"

    def start(self) -> ServerProcess:
        self.tmp_path.mkdir(parents=True, exist_ok=True)
        port_file = self.tmp_path / f"server-{self.runs}.port"
        port_file.unlink(missing_ok=True)
        self.log_path = self.tmp_path / f"server-{self.runs}.log"
        self.runs += 1
        config = {"listeners": f"PLAINTEXT://127.0.0.1:{self.port}", **self.config}
        if self.port and "listeners" not in self.config:  # a restart binds the same port
            config["listeners"] = f"PLAINTEXT://127.0.0.1:{self.port}"
        args = [sys.executable, "-m", "tierlog.cli", "serve", "--data-dir", str(self.data_dir),
                "--port-file", str(port_file), *self.args]
        for key, value in config.items():
            args += ["--set", f"{key}={value}"]
        with open(self.log_path, "wb") as log_file:
            self.proc = subprocess.Popen(args, stdout=log_file, stderr=subprocess.STDOUT,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + TIMEOUT_S
        while not port_file.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"tierlog serve exited with {self.proc.returncode}:\n"
                                   f"{self.log_text()}")
            if time.monotonic() > deadline:
                self.kill()
                raise TimeoutError(f"tierlog serve did not bind in {TIMEOUT_S}s:\n"
                                   f"{self.log_text()}")
            time.sleep(0.02)  # polling the port file, bounded by the deadline
        host, _, port = port_file.read_text().rpartition(":")
        self.host, self.port = host, int(port)
        return self

    def log_text(self) -> str:
        """Everything the current (or last) process logged."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _stop(self, signum: int) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
        try:
            code = self.proc.wait(TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.proc = None
        return code

    def terminate(self) -> int:
        """SIGTERM: a clean shutdown; returns the exit status."""
        return self._stop(signal.SIGTERM)

    def kill(self) -> int:
        """SIGKILL: no clean shutdown; returns the exit status."""
        return self._stop(signal.SIGKILL)

    def restart(self, *, hard: bool = False) -> ServerProcess:
        """Stop (SIGKILL when ``hard``, else SIGTERM) and start again on the same port."""
        if hard:
            self.kill()
        else:
            self.terminate()
        return self.start()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.alive():
            self.terminate()


def start(tmp_path: Path, config: Mapping[str, Any] | None = None, *,
          data_dir: Path | None = None, args: Sequence[str] = ()) -> ServerProcess:
    """Start ``tierlog serve`` over ``tmp_path/data`` (or ``data_dir``) with ``config``
    (Kafka's server.properties keys) and more ``args`` on an ephemeral port; stop it with
    ``terminate()``."""
    return ServerProcess(tmp_path, config, data_dir, args).start()
