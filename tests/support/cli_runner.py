"""Runs ``tierlog`` as a user does (a subprocess of this interpreter) for the CLI tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def tierlog(*args: str | Path, stdin: bytes | str | None = None, cwd: Path | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``python -m tierlog.cli ARGS``; with ``check``, fail on a non-zero exit or any
    traceback and return the finished process (text stdout/stderr)."""
    data = stdin.encode() if isinstance(stdin, str) else stdin
    proc = subprocess.run([sys.executable, "-m", "tierlog.cli", *map(str, args)], input=data,
                          capture_output=True, cwd=cwd, timeout=120, check=False)
    done = subprocess.CompletedProcess(proc.args, proc.returncode,
                                       proc.stdout.decode("utf-8", "replace"),
                                       proc.stderr.decode("utf-8", "replace"))
    if check:
        assert done.returncode == 0, f"exit {done.returncode}: {done.stderr}"
        assert "Traceback" not in done.stderr, done.stderr
    return done


def user_error(*args: str | Path, stdin: bytes | str | None = None,
               cwd: Path | None = None) -> str:
    """Run a command that must fail on the user's input: exit 1, one ``tierlog: error:`` line
    on stderr, no traceback. Returns that line."""
    done = tierlog(*args, stdin=stdin, cwd=cwd, check=False)
    assert done.returncode == 1, f"exit {done.returncode}: {done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("tierlog: error:")]
    assert len(errors) == 1, done.stderr
    return errors[0]
