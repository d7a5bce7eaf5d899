"""``tierlog tier`` and ``tierlog demo``: tier a topic to a local remote directory, then read
its old offsets back through the command line; the demo end to end (small, without Spark)."""

from __future__ import annotations

from pathlib import Path

from cli_runner import tierlog, user_error
from tierlog.manager import LogManager


def _describe(props: Path, topic: str) -> dict[str, str]:
    line = tierlog("--config", props, "topics", "--describe", "--topic", topic
                   ).stdout.splitlines()[1]
    return dict(part.split(": ", 1) for part in line.strip().split("\t"))


def test_tier_then_consume_old_offsets_from_the_remote_tier(tmp_path: Path) -> None:
    props = tmp_path / "broker.properties"
    props.write_text(f"log.dirs={tmp_path / 'data'}\nremote.storage.manager=local\n"
                     f"remote.storage.url={(tmp_path / 'tier').as_uri()}\n")
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


def test_demo_small_without_spark(tmp_path: Path) -> None:
    out = tierlog("demo", "--records", "20000", "--no-spark", "--quiet", cwd=tmp_path).stdout
    assert "Created topic 'demo' with 3 partitions in demo-data" in out
    assert "Produced 20,000 records" in out
    assert out.count(" remote tier ") >= 3 and " local disk " in out
    assert "counts match what was produced" in out
    data = tmp_path / "demo-data"
    assert (data / "server.properties").is_file() and (data / ".tierlog-demo").is_file()
    # The data dir remembers its tier: later commands read old offsets without settings.
    fields = tierlog("--data-dir", data, "topics", "--describe", "--topic", "demo"
                     ).stdout.splitlines()[1]
    assert "RemoteSegments: 0" not in fields
    first = tierlog("--data-dir", data, "consume", "--topic", "demo", "--partition", "1",
                    "--offset", "0", "--max-messages", "1", "--print-key").stdout
    assert first.startswith("user-")
    # A second run wipes its own directory; a foreign non-empty directory is refused.
    tierlog("demo", "--records", "2000", "--no-spark", "--quiet", cwd=tmp_path)
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("precious")
    error = user_error("demo", "--data-dir", foreign, "--no-spark", cwd=tmp_path)
    assert "refusing to wipe" in error and (foreign / "keep.txt").exists()
