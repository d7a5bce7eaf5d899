"""atomic_write_bytes/text and fsync_dir: a replaced file holds the old or the new content."""

from __future__ import annotations

import pytest

from tierlog.common.atomic import atomic_write_bytes, atomic_write_text, fsync_dir


def test_write_creates_then_replaces_and_leaves_no_tmp(tmp_path):
    target = tmp_path / "state"
    atomic_write_bytes(target, b"first")
    assert target.read_bytes() == b"first"
    atomic_write_bytes(target, b"second, longer")
    assert target.read_bytes() == b"second, longer"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]


def test_stray_tmp_from_a_crash_neither_breaks_reading_nor_the_next_write(tmp_path):
    target = tmp_path / "state"
    atomic_write_bytes(target, b"durable")
    (tmp_path / "state.tmp").write_bytes(b"half-written garbage that is longer")
    assert target.read_bytes() == b"durable"
    atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"new"
    assert not (tmp_path / "state.tmp").exists()


def test_failed_write_keeps_the_old_content_and_removes_the_tmp(tmp_path):
    target = tmp_path / "state"
    atomic_write_bytes(target, b"old")
    with pytest.raises(TypeError):
        atomic_write_bytes(target, "not bytes")  # type: ignore[arg-type]
    assert target.read_bytes() == b"old"
    assert not (tmp_path / "state.tmp").exists()


def test_write_text_is_utf8(tmp_path):
    target = tmp_path / "t"
    atomic_write_text(str(target), "topic-é 0 1\n")
    assert target.read_bytes() == "topic-é 0 1\n".encode()


def test_fsync_dir(tmp_path):
    fsync_dir(tmp_path)
    with pytest.raises(FileNotFoundError):
        fsync_dir(tmp_path / "missing")
