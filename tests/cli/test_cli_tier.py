"""``tierlog tier`` and ``tierlog demo``: tier a topic to a local remote directory, then read
its old offsets back through the command line; a tier that fails every request reported once
per partition with a true summary; the demo end to end (small, without Spark)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import uuid
from pathlib import Path

from support.cli_runner import tierlog, user_error
from support.s3 import S3_BUCKET

from tierlog import Record
from tierlog.common.properties import read_properties
from tierlog.manager.log_manager import LogManager


def _describe(props: Path, topic: str) -> dict[str, str]:
    line = tierlog("--config", props, "topics", "--describe", "--topic", topic
                   ).stdout.splitlines()[1]
    return dict(part.split(": ", 1) for part in line.strip().split("\t"))


def test_tier_then_consume_old_offsets_from_the_remote_tier(tmp_path: Path) -> None:
    props = tmp_path / "broker.properties"
    props.write_text(f"log.dirs={tmp_path / 'data'}\nremote.storage.manager=local\n"
                     f"remote.storage.url={(tmp_path / 'tier').as_uri()}\n"
                     # a loaded CI host can pass Kafka's 500 ms on the tier's first read
                     "remote.fetch.max.wait.ms=30000\n")
    tierlog("--config", props, "topics", "--create", "--topic", "clicks", "--partitions", "1",
            "--config", "remote.storage.enable=true", "--config", "segment.bytes=4096",
            "--config", "index.interval.bytes=256", "--config", "local.retention.bytes=4096")
    lines = [f"click {i}" for i in range(2000)]
    tierlog("produce", "--config", props, "--topic", "clicks", "--batch-size", "50",
            stdin="\n".join(lines) + "\n")
    out = tierlog("tier", "--config", props).stdout
    copied = int(out.split("copied ")[1].split()[0])
    assert out.startswith("clicks-0: copied ") and copied > 3
    fields = _describe(props, "clicks")
    assert int(fields["RemoteSegments"]) == copied
    assert fields["LogStartOffset"] == "0" and int(fields["LocalLogStartOffset"]) > 1000
    assert (tmp_path / "tier").is_dir()
    # Offsets below the local log start are read back from the tier, in order and complete.
    got = tierlog("consume", "--config", props, "--topic", "clicks").stdout.splitlines()
    assert got == lines
    first = tierlog("consume", "--config", props, "--topic", "clicks", "--offset", "10",
                    "--max-messages", "2", "--print-offset").stdout.splitlines()
    assert first == ["Offset:10\tclick 10", "Offset:11\tclick 11"]
    # Nothing new to copy: a second run copies nothing.
    assert "copied 0 segments" in tierlog("tier", "--config", props, "--quiet").stdout
    with LogManager.open(tmp_path / "data", {"remote.storage.url": (tmp_path / "tier").as_uri()}
                         ) as mgr:
        res = mgr.log("clicks", 0).read(0)
        assert res.from_remote and next(iter(res.records())).value == b"click 0"


def test_reading_a_tiered_topic_needs_the_remote_url(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LogManager.open(data, {"remote.storage.url": (tmp_path / "tier").as_uri()}) as mgr:
        mgr.create_topic("t", 1, {"remote.storage.enable": True})
    error = user_error("--data-dir", data, "consume", "--topic", "t")
    assert "remote.storage.url: is required when a topic has remote.storage.enable=true" in error


def test_demo_small_without_spark(tmp_path: Path, s3_options: dict[str, str]) -> None:
    url = f"s3://{S3_BUCKET}/demo-{uuid.uuid4().hex[:8]}"
    sets = [a for k, v in s3_options.items() for a in ("--set", f"remote.storage.options.{k}={v}")]
    out = tierlog("demo", "--records", "20000", "--no-spark", "--quiet", "--remote", url, *sets,
                  cwd=tmp_path).stdout
    assert "Created topic 'demo' with 3 partitions in demo-data" in out
    assert "Produced 20,000 records" in out
    assert out.count(" remote tier ") >= 3 and " local disk " in out
    assert "counts match what was produced" in out
    # However many tails the scheduler published before the demo's own call, it says so.
    assert "the tier holds 3 of 3 partitions up to the high watermark (" in out
    assert "readers of the tier see everything" in out
    # The demo's topic has a table: every tiered offset of each partition is in it.
    assert "Topic table (remote.log.table.enable=true)" in out and " in demo-2." in out
    # ... and tiering compacts it: each partition's files merged into a run file.
    assert "Compaction (remote.log.table.compaction.enable=true) merged them into 3 run " \
           "files." in out
    data = tmp_path / "demo-data"
    assert (data / ".tierlog-demo").is_file()
    # The data dir remembers its tier, every storage option but the secrets.
    assert read_properties(data / "server.properties") == {
        "remote.storage.manager": "s3", "remote.storage.url": url,
        "remote.storage.options.endpoint_url": s3_options["endpoint_url"],
        "remote.storage.options.region": s3_options["region"]}
    assert "remote.storage.options.key, remote.storage.options.secret" in out
    # Every command the demo suggests runs as printed (credentials from the environment).
    suggested = [line.strip() for line in out.split("Explore it with:\n")[1].splitlines()
                 if line.startswith("  tierlog ")]
    assert len(suggested) == 4
    outputs = [tierlog(*shlex.split(command.split(" | ")[0])[1:], cwd=tmp_path).stdout
               for command in suggested]
    demo_partitions = [line for line in outputs[0].splitlines()
                       if "Topic: demo\tPartition: " in line]
    assert len(demo_partitions) == 3
    assert not [line for line in demo_partitions if "RemoteSegments: 0\t" in line]
    assert outputs[1].startswith("Offset:0\t") and "user-" in outputs[1]
    assert " 0 problems," in outputs[2]
    # A second run (the default tier, in the data dir) wipes its own directory; a foreign
    # non-empty directory is refused.
    tierlog("demo", "--records", "2000", "--no-spark", "--quiet", cwd=tmp_path)
    assert read_properties(data / "server.properties") == {
        "remote.storage.manager": "local",
        "remote.storage.url": (data.resolve() / "remote").as_uri()}
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("precious")
    error = user_error("demo", "--data-dir", foreign, "--no-spark", cwd=tmp_path)
    assert "refusing to wipe" in error and (foreign / "keep.txt").exists()


# -- a tier that refuses every request --------------------------------------------------


def _tiered_topic(data: Path, tier_config: dict[str, str]) -> int:
    """A topic with remote.storage.enable and several closed segments, none tiered yet;
    returns its local segment count."""
    with LogManager.open(data, tier_config, start_scheduler=False) as mgr:
        log = mgr.create_topic("c", 1, {"remote.storage.enable": True,
                                        "segment.bytes": 4096})[0]
        for i in range(300):
            log.append_records([Record(key=b"k", value=b"click %d" % i * 4)])
        return len(log.segments)


def _assert_reported_once(done: subprocess.CompletedProcess[str], cause: str,
                          segments: int) -> None:
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.count(cause) == 1, done.stderr
    (error,) = [line for line in done.stderr.splitlines() if line.startswith("tierlog: error:")]
    assert error.startswith("tierlog: error: c-0: the remote tier is unavailable")
    assert f"c-0: copied 0 segments (0 B), deleted 0 remote segments, local segments " \
           f"{segments} -> {segments}" in done.stdout


def test_a_failing_s3_tier_is_reported_once_and_the_summary_is_true(
        tmp_path: Path, s3_options: dict[str, str]) -> None:
    options = {f"remote.storage.options.{k}": v for k, v in s3_options.items()}
    segments = _tiered_topic(tmp_path / "data", {
        "remote.storage.manager": "s3", **options,
        "remote.storage.url": f"s3://{S3_BUCKET}/refusing-{uuid.uuid4().hex[:8]}"})
    assert segments >= 3
    # Every request of the tier now fails, as with a wrong secret: the bucket is not there.
    props = tmp_path / "broker.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in options.items())
                     + f"log.dirs={tmp_path / 'data'}\nremote.storage.manager=s3\n"
                       f"remote.storage.url=s3://no-such-bucket-{uuid.uuid4().hex[:8]}/t\n")
    done = tierlog("--config", props, "tier", "--quiet", check=False)
    _assert_reported_once(done, "The specified bucket does not exist", segments)


def test_a_tier_that_cannot_be_built_is_reported_per_partition(tmp_path: Path) -> None:
    tier = tmp_path / "tier"
    segments = _tiered_topic(tmp_path / "data", {"remote.storage.url": tier.as_uri()})
    shutil.rmtree(tier)
    tier.write_text("a file where the tier's directory was")
    done = tierlog("--data-dir", tmp_path / "data", "--set",
                   f"remote.storage.url={tier.as_uri()}", "tier", "--quiet", check=False)
    _assert_reported_once(done, "File exists", segments)
