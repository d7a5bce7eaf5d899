"""The runnable examples run as a user runs them: quickstart on a local dir, tiering to S3
against moto's real HTTP server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.s3 import S3_ACCESS_KEY, S3_BUCKET, S3_REGION, S3_SECRET

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120,
                          env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc


def test_quickstart_appends_reads_and_reopens(tmp_path: Path) -> None:
    out = _run(str(EXAMPLES / "quickstart.py"), str(tmp_path / "data")).stdout
    assert "appended offsets up to 999" in out
    assert "0 " in out and "b'customer-0' b'order 0'" in out
    assert "first offset at or after now+10ms: 500" in out
    assert "reopened: log start 0, log end 1000, high watermark 1000" in out
    assert (tmp_path / "data" / "orders-0" / "00000000000000000000.log").is_file()


def test_tiering_to_s3_reads_old_offsets_from_the_bucket(tmp_path: Path, s3_endpoint: str) -> None:
    env = {**os.environ, "AWS_ACCESS_KEY_ID": S3_ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": S3_SECRET,
           "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"}
    url = f"s3://{S3_BUCKET}/examples-{tmp_path.name}"
    out = _run(str(EXAMPLES / "tiering_to_s3.py"), url, "--endpoint-url", s3_endpoint,
               "--region", S3_REGION, "--records", "6000", "--data-dir", str(tmp_path / "data"),
               env=env).stdout
    lines = out.splitlines()
    assert lines[0].startswith("copied ") and f"to {url}" in lines[0]
    assert int(lines[0].split()[1]) > 0
    assert lines[1] == "offset 0: 'click 0' from the remote tier"
    assert lines[2].endswith("from the remote tier")
    assert lines[3].endswith("from the local disk")
    # The objects really are in the bucket, under the partition's directory.
    from support.s3 import s3_client

    names = s3_client(s3_endpoint).find(f"{S3_BUCKET}/examples-{tmp_path.name}")
    assert any(n.endswith(".log") and "/clicks-0-" in n for n in names)


def test_spark_over_the_remote_tier(tmp_path: Path) -> None:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    proc = subprocess.run([sys.executable, str(EXAMPLES / "spark_over_remote_tier.py")],
                          capture_output=True, text=True, timeout=300, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    tiered = int(out.split("tiered ", 1)[1].split()[0])
    assert tiered >= 3, out
    rows = [[cell.strip() for cell in line.strip("|").split("|")]
            for line in out.splitlines() if line.startswith("|") and "partition" not in line]
    # From the 600th second on, eu region only: half of the last 2400 orders per partition.
    assert [(row[0], row[1]) for row in rows] == [("0", "1200"), ("1", "1200"), ("2", "1200")], out
