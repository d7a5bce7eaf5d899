"""``tierlog table build``, ``compact`` and ``show`` through the CLI entry point: a build over a
tier written without tables, its summary, a rerun that converts nothing, the table shown per
partition (and as JSON), a compaction (dry run first) that leaves fewer files with the same
rows, and one clear error line for a missing topic, table or tier, or a bad option."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli_runner import tierlog, user_error
from support.tier_builder import BuiltTier, build_tier

from tierlog.plugins.local import create_remote_storage


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> BuiltTier:
    root = tmp_path_factory.mktemp("cli_table")
    url = (root / "tier").as_uri()
    return build_tier(root, create_remote_storage(url, {"fsync": False}), url, rounds=3)


def test_build_then_show(built: BuiltTier) -> None:
    error = user_error("table", "show", built.url, "--topic", "orders")
    assert "has no table" in error and "tierlog table build" in error
    assert "has no table" in user_error("table", "compact", built.url, "--topic", "orders")
    assert "has no table" in user_error("table", "show", built.url, "--topic", "orders")

    out = tierlog("table", "build", built.url, "--topic", "orders", "--batch-links", "2",
                  "--quiet").stdout
    assert out.startswith("tierlog.orders-") and "segments converted" in out
    assert "already covered" not in out

    shown = json.loads(tierlog("table", "show", built.url, "--topic", "orders",
                               "--json").stdout)
    assert shown["table"].startswith("tierlog.orders-") and shown["snapshot_id"] is not None
    parts = shown["partitions"]
    assert set(parts) == {"0", "1"}
    for p, entry in parts.items():
        tp = built.partitions[("orders", int(p))]
        assert entry["start"] == 0 and 0 < entry["covered"] <= tp.tier_end
        assert entry["files"] > 0 and entry["bytes"] > 0
        # every record below the covered end is a row (aborted ones too, flagged)
        below = [r for r in tp.expected["read_uncommitted"] if r.offset < entry["covered"]]
        assert entry["rows"] == len(below)

    again = tierlog("table", "build", built.url, "--topic", "orders", "--quiet").stdout
    assert "0 segments converted" in again and "0 commits" in again
    assert f"snapshot {shown['snapshot_id']}" in again

    text = tierlog("table", "show", built.url, "--topic", "orders").stdout.splitlines()
    assert text[0].startswith(shown["table"]) and f"snapshot {shown['snapshot_id']}" in text[0]
    assert text[1].split() == ["partition", "start", "covered", "files", "segments", "rows",
                               "bytes"]
    assert [line.split()[0] for line in text[2:]] == ["0", "1"]
    assert all(e["segments"] == e["files"] for e in parts.values())  # one file per segment

    dry = tierlog("table", "compact", built.url, "--topic", "orders", "--target-bytes",
                  str(1 << 20), "--max-links", "1000", "--dry-run").stdout
    assert "2 runs planned; nothing changed" in dry and "would merge" in dry
    assert json.loads(tierlog("table", "show", built.url, "--topic", "orders",
                              "--json").stdout) == shown

    out = tierlog("table", "compact", built.url, "--topic", "orders", "--target-bytes",
                  str(1 << 20), "--max-links", "1000", "--quiet").stdout
    assert "2 run files written" in out
    merged = json.loads(tierlog("table", "show", built.url, "--topic", "orders",
                                "--json").stdout)["partitions"]
    for p, entry in merged.items():
        before = parts[p]
        assert entry["files"] == 1 and entry["segments"] == before["files"]
        assert (entry["start"], entry["covered"], entry["rows"]) == (
            before["start"], before["covered"], before["rows"])
    again = tierlog("table", "compact", built.url, "--topic", "orders", "--target-bytes",
                    str(1 << 20), "--max-links", "1000", "--quiet").stdout
    assert "0 run files written" in again


def test_a_missing_topic_or_tier_is_one_error_line(built: BuiltTier, tmp_path: Path) -> None:
    assert "nosuch" in user_error("table", "build", built.url, "--topic", "nosuch", "--quiet")
    assert "nosuch" in user_error("table", "show", built.url, "--topic", "nosuch")
    missing = tmp_path / "absent"
    assert str(missing) in user_error("table", "build", missing.as_uri(), "--topic", "orders")
    assert "nosuch" in user_error("table", "compact", built.url, "--topic", "nosuch")
    assert "--max-links" in user_error("table", "compact", built.url, "--topic", "orders",
                                       "--max-links", "1")
    assert "--target-bytes" in user_error("table", "compact", built.url, "--topic", "orders",
                                          "--target-bytes", "10")
