"""Index space is reserved for real (posix_fallocate) when an index file is created or grown:
on a nearly full disk a roll raises OSError and leaves the log unchanged, where a sparse index
made the process die of SIGBUS on its first write through the mapping.

The disk is a small tmpfs mounted in a private mount namespace (``unshare -m`` as root, else
``unshare -rm`` in a user namespace), so the test needs no mount on the host; it is skipped
where neither is allowed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from tierlog.index.base import RESERVE_STEP_BYTES
from tierlog.index.offset_index import OffsetIndex

_UNSHARE = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]
_MOUNT = 'mount -t tmpfs -o size={size} tmpfs "$1"'

#: Both scripts fill the small disk up to ``keep_free`` bytes with the same helper.
_FILL_DISK = textwrap.dedent("""
    def fill(keep_free):
        fd = os.open(disk + "/filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            while True:
                os.write(fd, bytes(4096))
        except OSError:
            pass
        size = os.fstat(fd).st_size
        os.ftruncate(fd, max(0, size - keep_free))
        os.close(fd)
""")

_SCRIPT = textwrap.dedent("""
    import json, os, sys
    from tierlog import Log, Record

    disk = sys.argv[1]
    now = [1_700_000_000_000]
    config = {"segment.index.bytes": 64 * 1024, "index.interval.bytes": 1, "segment.ms": 60_000}
    log = Log.open(disk + "/t-0", config, time_ms=lambda: now[0])
    for i in range(5):
        log.append_records([Record(key=b"k%d" % i, value=b"v" * 100)])

    {fill_disk}
    def state():
        return (sorted(os.listdir(log.directory)), log.segments.base_offsets(),
                log.log_end_offset)

    def attempt(fn):
        try:
            fn()
            return "ok"
        except OSError as e:
            return f"OSError errno={e.errno}: {e}"

    fill(keep_free=8192)  # two pages: a producer snapshot and one page of .log data
    before = state()
    out = {}
    now[0] += 120_000  # the active segment is due to roll
    out["append_roll"] = attempt(lambda: log.append_records([Record(key=b"x", value=b"y")]))
    out["unchanged_after_append"] = state() == before
    out["roll"] = attempt(log.roll)
    out["unchanged_after_roll"] = state() == before
    out["read"] = [r.offset for r in log.read(0, 1 << 16).records()]
    os.unlink(disk + "/filler")
    out["append_after_freeing"] = attempt(
        lambda: log.append_records([Record(key=b"x", value=b"y")]))
    out["segments_after_freeing"] = log.segments.base_offsets()
    log.close()
    print(json.dumps(out))
""").replace("{fill_disk}", _FILL_DISK)


def _in_small_tmpfs(size: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``args`` (with "$1" the mount point) in a private namespace on a tmpfs of ``size``."""
    return subprocess.run(
        [*_UNSHARE, "sh", "-c", f'{_MOUNT.format(size=size)} && shift && exec "$@"', "sh",
         "/mnt", *args],
        check=False, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def small_tmpfs_works() -> None:
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    probe = _in_small_tmpfs("64k", "true")
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs in a private namespace: {probe.stderr.strip()}")


def test_rolling_on_a_full_disk_raises_and_changes_nothing(small_tmpfs_works):
    done = _in_small_tmpfs("512k", sys.executable, "-c", _SCRIPT, "/mnt")
    assert done.returncode == 0, f"died with {done.returncode} (-7 is SIGBUS): {done.stderr}"
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["append_roll"].startswith("OSError errno=28"), out
    assert out["roll"].startswith("OSError errno=28"), out
    assert "/mnt/t-0/" in out["roll"]  # names the file it could not create
    assert out["unchanged_after_append"] and out["unchanged_after_roll"], out
    assert out["read"] == [0, 1, 2, 3, 4]
    assert out["append_after_freeing"] == "ok"
    assert out["segments_after_freeing"] == [0, 5]


def _allocated(path: object) -> int:
    return os.stat(path).st_blocks * 512  # type: ignore[arg-type]


def test_a_created_index_reserves_its_first_step_not_its_maximum(tmp_path):
    index = OffsetIndex(tmp_path / "00000000000000000000.index", 0, 10 << 20)
    try:
        assert os.stat(index.path).st_size == 10 << 20  # appends write into the mapping
        assert RESERVE_STEP_BYTES <= _allocated(index.path) < 2 * RESERVE_STEP_BYTES
        assert index.reserved_entries == RESERVE_STEP_BYTES // index.entry_size
    finally:
        index.close()


def test_a_grown_index_reserves_the_step_under_its_next_entry(tmp_path):
    index = OffsetIndex(tmp_path / "00000000000000000000.index", 0, 1 << 20)
    try:
        index.append(0, 0)
        index.trim_to_valid_size()
        index.resize(1 << 20)
        assert RESERVE_STEP_BYTES <= _allocated(index.path) < 2 * RESERVE_STEP_BYTES
        assert index.lookup(0).offset == 0
    finally:
        index.close()


_GROWTH_SCRIPT = textwrap.dedent("""
    import json, os, sys
    from tierlog import Log, Record
    from tierlog.index.base import RESERVE_STEP_BYTES
    from tierlog.index.offset_index import OffsetIndex

    disk = sys.argv[1]
    out = {}

    {fill_disk}
    # 1. An index of 10 MiB on a 1 MiB disk: created, its space reserved step by step; the
    #    step the disk cannot hold fails the append with OSError, not SIGBUS.
    index = OffsetIndex(disk + "/00000000000000000000.index", 0, 10 << 20)
    fill(keep_free=0)
    step_entries = RESERVE_STEP_BYTES // index.entry_size
    for i in range(step_entries):
        index.append(i, i)
    try:
        index.append(step_entries, step_entries)
        out["index_past_step"] = "ok"
    except OSError as e:
        out["index_past_step"] = f"OSError errno={e.errno}: {e}"
    out["index_entries"] = index.entries
    out["index_last"] = index.lookup(step_entries + 5).offset
    os.unlink(disk + "/filler")
    index.append(step_entries, step_entries)
    out["index_after_freeing"] = index.entries
    index.delete_if_exists()

    # 2. A log whose indexes may take 2 x 10 MiB, on the same disk: appends (the armed fast
    #    path included) run until the disk is full, which fails an append with OSError.
    log = Log.open(disk + "/t-0", {"segment.index.bytes": 10 << 20,
                                   "index.interval.bytes": 1})
    appended, error = 0, None
    while appended < 200_000:
        try:
            log.append_records([Record(value=b"v" * 8, timestamp=1_700_000_000_000 + appended)])
        except OSError as e:
            error = f"OSError errno={e.errno}: {e}"
            break
        appended += 1
    out["log_error"] = error
    out["log_consistent"] = log.log_end_offset == appended
    out["log_read"] = sum(1 for _ in log.read(0, 1 << 30).records()) == appended
    try:
        log.close()  # its producer snapshot may not fit either
    except OSError:
        pass
    print(json.dumps(out))
""").replace("{fill_disk}", _FILL_DISK)


def test_index_space_grows_in_steps_and_a_full_disk_fails_an_append(small_tmpfs_works):
    done = _in_small_tmpfs("1m", sys.executable, "-c", _GROWTH_SCRIPT, "/mnt")
    assert done.returncode == 0, f"died with {done.returncode} (-7 is SIGBUS): {done.stderr}"
    out = json.loads(done.stdout.splitlines()[-1])
    step_entries = RESERVE_STEP_BYTES // 8
    assert out["index_past_step"].startswith("OSError errno=28"), out
    assert "/mnt/00000000000000000000.index" in out["index_past_step"]
    assert out["index_entries"] == step_entries  # unchanged by the failed append
    assert out["index_last"] == step_entries - 1
    assert out["index_after_freeing"] == step_entries + 1
    assert out["log_error"] is not None and out["log_error"].startswith("OSError errno=28"), out
    assert out["log_consistent"] and out["log_read"], out
