"""LogManager: every partition of one or more log dirs, their checkpoints and background work.

Loads partitions in parallel at open, creates, adopts and deletes topics, writes Kafka's
log-dir checkpoints (tierlog.checkpoint.log_dir_checkpoints) and the clean-shutdown marker, and runs
flush/checkpoint/retention tasks on a Scheduler. What it owns of the remote tier (attaching it,
its unavailability, tiering and tail publishing) is its ManagerRemote
(tierlog.manager.manager_remote).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, Self

from tierlog.checkpoint.log_dir_checkpoints import (
    ALL_CHECKPOINTS,
    HIGH_WATERMARKS,
    LOG_START_OFFSETS,
    RECOVERY_POINTS,
    CheckpointedLog,
    read_checkpoint,
    write_checkpoints,
)
from tierlog.checkpoint.partition_metadata import new_topic_id
from tierlog.common import filenames
from tierlog.common.atomic import atomic_write_text, fsync_dir
from tierlog.common.data_dir_lock import DataDirLock, live_owner
from tierlog.common.properties import read_properties_if_exists, write_properties
from tierlog.common.scheduler import Scheduler, system_time_ms
from tierlog.common.stats import perf_ns
from tierlog.config import LogConfig, check_topic_config, topic_config_key
from tierlog.contracts.cleanup_policy import CleanupResult
from tierlog.errors import (
    ConfigError,
    InvalidTopicError,
    LogDirectoryError,
    RemoteStorageError,
    TierlogError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from tierlog.log.log import Log
from tierlog.manager.manager_config import ManagerConfig
from tierlog.manager.manager_remote import ManagerRemote
from tierlog.plugin_manager import get_plugins
from tierlog.remote.api import RemoteLogSegmentMetadata
from tierlog.remote.ops.adoption import seed_log_dir
from tierlog.remote.ops.restore import (
    Download,
    RestorePlan,
    commit_cut_prefix,
    cut_tier,
    plan_restore,
    tier_topics,
)
from tierlog.remote.ops.restore_fork import (
    check_new_topic,
    commit_copies,
    copy_kept,
    discard_fork,
    fork_plan,
)
from tierlog.remote.ops.restore_table import cut_tables
from tierlog.remote.rlm.producer_snapshots import TierProducerSnapshots
from tierlog.remote.rlm.rlm import Progress, RemoteLogManager, TierResult
from tierlog.remote.rlm.unavailable import UnavailableRemote
from tierlog.remote.tier.ownership import manager_owner, tier_of

log = logging.getLogger(__name__)

#: Per-partition file holding the topic's config overrides (Kafka keeps them in its metadata log).
TOPIC_CONFIG_FILE = "topic-config.properties"

TopicPartition = tuple[str, int]


def _source_snapshot(snapshots: Callable[[str, str, int, int], bytes | None], topic_id: str, topic: str, _id: str,
                     _topic: str, partition: int, offset: int) -> bytes | None:
    """A restore into a new topic opens its log on the source's producer snapshot at the
    cut (the same bytes its copies carry, not committed until the attach)."""
    return snapshots(topic_id, topic, partition, offset)


class LogManager:
    """The logs of one tierlog node.

    Thread-safe: topic creation and deletion hold the manager's lock; each Log guards itself.
    Use as a context manager, or call :meth:`close`, so the clean-shutdown marker is written
    and the next open skips recovery.
    """

    def __init__(self, dirs: Sequence[Path], config: ManagerConfig, *,
                 time_ms: Callable[[], int], scheduler: Scheduler,
                 read_only: bool = False) -> None:
        self.dirs = list(dirs)
        #: Opened read-only (see :meth:`open`): nothing under the dirs is written.
        self.read_only = read_only
        #: The exclusive lock of each dir, held from open to close (none when read-only).
        self._dir_locks: list[DataDirLock] = []
        #: Read-only: the pid of each dir's live owner (0: unknown), None when it has none.
        self.owners: dict[Path, int | None] = {}
        #: Read-only beside a live owner: why the remote tier is not attached.
        self._remote_detached: RemoteStorageError | None = None
        self.config = config
        self._time_ms = time_ms
        self.scheduler = scheduler
        self._lock = threading.RLock()
        #: Serializes the checkpoint files' writes: the scheduled ones run beside a topic's
        #: create or delete (both write through one ``<name>.tmp``).
        self._checkpoint_lock = threading.Lock()
        self._logs: dict[TopicPartition, Log] = {}
        self._closed = False
        self.clean_shutdown: dict[Path, bool] = {}
        self.plugins = get_plugins()
        #: The remote tier of these logs: attaching it, its unavailability, its work.
        self._remote = ManagerRemote(config, self.plugins, self.dirs[0], time_ms,
                                     lambda: self._logs)

    @property
    def remote(self) -> ManagerRemote:
        """What the manager owns of the remote tier (a replicating node tells it its
        leaderships: ``ManagerRemote.set_role``)."""
        return self._remote

    @property
    def remote_log_manager(self) -> RemoteLogManager | None:
        """Tiering, once a topic enables remote.storage.enable (None until then)."""
        return self._remote.rlm

    # -- opening ---------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        dirs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        config: Mapping[str, Any] | None = None,
        *,
        time_ms: Callable[[], int] | None = None,
        scheduler: Scheduler | None = None,
        start_scheduler: bool = True,
        read_only: bool = False,
    ) -> LogManager:
        """Open every partition under the log dirs (recovering after a crash) and start the
        background tasks. Pass ``start_scheduler=False`` and drive ``mgr.scheduler.run_due()``
        with a fake clock in tests.

        Each dir is locked for this manager until :meth:`close` (Kafka's ``.lock``,
        :class:`~tierlog.common.data_dir_lock.DataDirLock`): DataDirLockedError naming the holder's
        pid, before anything is read or written, when another open holds one.

        ``read_only`` opens existing dirs to read beside a live owner (or after a crash)
        without writing anything under them: no lock, no recovery, no index rebuild, no
        clean-shutdown marker, no checkpoint, no background task, topic changes refused
        (see :meth:`Log.open`). Beside a live owner the remote tier is not attached (that
        would write); a tiered partition then reports why."""
        if isinstance(dirs, (str, os.PathLike)):
            dirs = [dirs]
        paths = [Path(d) for d in dirs]
        if not paths:
            raise ConfigError("log.dirs", "at least one log directory is required")
        clock = time_ms or system_time_ms
        manager = cls(paths, ManagerConfig(config), time_ms=clock,
                      scheduler=scheduler or Scheduler(clock), read_only=read_only)
        try:
            if read_only:
                manager._find_owners()
            else:
                manager._lock_dirs()
            manager._load_all()
            manager._attach_remote()
        except BaseException:
            manager._release_dirs()
            raise
        if read_only:
            return manager
        manager._schedule_tasks()
        if start_scheduler:
            manager.scheduler.start()
        return manager

    def _lock_dirs(self) -> None:
        """Take every dir's exclusive lock (creating a missing dir first)."""
        for log_dir in self.dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
            self._dir_locks.append(DataDirLock.acquire(log_dir))

    def _release_dirs(self) -> None:
        for lock in self._dir_locks:
            lock.release()
        self._dir_locks.clear()

    def _find_owners(self) -> None:
        """Read-only: every dir must exist; note which have a live owner."""
        for log_dir in self.dirs:
            if not log_dir.is_dir():
                raise LogDirectoryError(f"data dir {log_dir} does not exist")
            self.owners[log_dir] = live_owner(log_dir)
        owned = {d: pid for d, pid in self.owners.items() if pid is not None}
        if owned:
            holders = ", ".join(f"{d} (process {pid or 'unknown'})" for d, pid in owned.items())
            log.info("reading %s read-only beside its live owner", holders)
            self._remote_detached = RemoteStorageError(
                f"not attached: {holders} is owned by a live process and a read-only open "
                f"does not attach the remote tier (attaching records its owner and caches "
                f"there); read through that process, or stop it")

    def _attach_remote(self) -> None:
        detached = self._remote_detached
        if detached is None:
            self._remote.attach(self._logs.values())
            return
        tiered = [lg for lg in self._logs.values() if lg.remote_storage_enabled]
        for partition_log in tiered:
            partition_log.attach_remote(UnavailableRemote(partition_log.directory.name, detached),
                                        partition_log.highest_offset_in_remote)
        if tiered:
            log.warning("the remote tier of %d tiered partitions is %s", len(tiered), detached)

    def _load_all(self) -> None:
        threads = self.config["num.recovery.threads.per.data.dir"]
        jobs: list[tuple[Path, Path, Mapping[TopicPartition, int], Mapping[TopicPartition, int]]] = []
        removed: Counter[str] = Counter()  # partitions of deleted topics, by topic
        for log_dir in self.dirs:
            marker = log_dir / filenames.CLEAN_SHUTDOWN_FILE
            self.clean_shutdown[log_dir] = marker.exists()
            if self.clean_shutdown[log_dir] and not self.read_only:
                # Kafka (KAFKA-10471) removes the marker before loading: loading may change
                # files, and a crash from here on must count as unclean.
                marker.unlink()
                fsync_dir(log_dir)
            recovery = read_checkpoint(log_dir, RECOVERY_POINTS)
            starts = read_checkpoint(log_dir, LOG_START_OFFSETS)
            for child in sorted(log_dir.iterdir()):
                if not child.is_dir():
                    continue
                if child.name.endswith(filenames.DELETE_DIR_SUFFIX):
                    if not self.read_only:
                        log.debug("removing %s left by an earlier topic deletion", child)
                        shutil.rmtree(child, ignore_errors=True)
                        removed[_deleted_topic(child.name)] += 1
                    continue
                try:
                    filenames.parse_partition_dir(child.name)
                except (LogDirectoryError, InvalidTopicError):
                    continue  # not a partition directory (e.g. a remote index cache)
                if self.read_only and not any(child.glob("*" + filenames.LOG_SUFFIX)):
                    # The live owner is creating it (no segment yet): nothing to read.
                    log.warning("%s holds no segment yet: not read", child)
                    continue
                jobs.append((log_dir, child, recovery, starts))
        for topic, count in sorted(removed.items()):
            log.info("removed %d partition dir%s left by an earlier deletion of topic %s",
                     count, "" if count == 1 else "s", topic)
        highwater = {}
        for log_dir in self.dirs:
            highwater.update(read_checkpoint(log_dir, HIGH_WATERMARKS))
        with ThreadPoolExecutor(max_workers=max(1, threads * len(self.dirs)),
                                thread_name_prefix="tierlog-load") as pool:
            loaded = list(pool.map(lambda job: self._load_partition(*job), jobs))
        for tp, partition_log in loaded:
            if tp in self._logs:
                raise LogDirectoryError(
                    f"partition {tp[0]}-{tp[1]} exists in two log dirs: "
                    f"{self._logs[tp].directory} and {partition_log.directory}"
                )
            self._logs[tp] = partition_log
            # Read-only beside a live owner whose logs advance the high watermark with every
            # append, the checkpoint lags it: the log end (where auto_high_watermark put it)
            # is the owner's high watermark.
            if tp in highwater and not (self.read_only and self.config["auto.high.watermark"]):
                partition_log.update_high_watermark(highwater[tp])
        log.info("loaded %d partition%s from %s", len(self._logs),
                 "" if len(self._logs) == 1 else "s", ", ".join(str(d) for d in self.dirs))
        self._log_recovery_summary([lg for _, lg in loaded])

    def _log_recovery_summary(self, logs: list[Log]) -> None:
        """One line for the whole load after an unclean shutdown (each partition that lost
        bytes has warned by itself, naming what it lost), none after a clean one."""
        unclean = [d for d in self.dirs if not self.clean_shutdown.get(d, True)]
        if not unclean or not logs:  # a new, empty dir has no marker and nothing to recover
            return
        verb = "checked (read-only, nothing changed)" if self.read_only else "recovered"
        checked = sum(lg.recovery.segments_recovered for lg in logs)
        lossy = sorted(lg.directory.name for lg in logs
                       if lg.recovery.dropped_anything or lg.recovery.damage)
        level = logging.WARNING if lossy else logging.INFO
        if not lossy:
            outcome = "no partition lost a byte"
        elif self.read_only:  # found and left, not recovered
            outcome = f"{len(lossy)} hold invalid bytes, left in place: {', '.join(lossy)}"
        else:
            outcome = f"{len(lossy)} lost or hold invalid bytes: {', '.join(lossy)}"
        log.log(level, "unclean shutdown of %s: %s %d segment%s of %d partition%s; %s",
                ", ".join(map(str, unclean)), verb, checked, "" if checked == 1 else "s",
                len(logs), "" if len(logs) == 1 else "s", outcome)

    def _load_partition(self, log_dir: Path, directory: Path,
                        recovery: Mapping[TopicPartition, int],
                        starts: Mapping[TopicPartition, int]) -> tuple[TopicPartition, Log]:
        tp = filenames.parse_partition_dir(directory.name)
        config = self._topic_config_from_disk(directory)
        self._check_cleanup_policies(config)
        partition_log = Log.open(
            directory, config, recovery_point=recovery.get(tp, 0),
            log_start_offset=starts.get(tp, 0), had_clean_shutdown=self.clean_shutdown[log_dir],
            remote_snapshots=(TierProducerSnapshots(self._remote.manager, self._lock)
                              if config["remote.storage.enable"] and not self.read_only
                              else None),
            read_only=self.read_only,
            **self._log_options(),
        )
        return tp, partition_log

    def _log_options(self) -> dict[str, Any]:
        """What every Log of this manager is opened with: a single-replica leader at epoch 0."""
        return {
            "time_ms": self._time_ms,
            "auto_high_watermark": self.config["auto.high.watermark"],
            "scheduler": self.scheduler,
            "producer_id_expiration_ms": self.config["producer.id.expiration.ms"],
            "plugins": self.plugins,
            "leader_epoch": 0,
        }

    def _check_cleanup_policies(self, config: LogConfig) -> None:
        known = self.plugins.registries.cleanup_policies
        for name in config["cleanup.policy"]:
            if name not in known:
                raise ConfigError("cleanup.policy",
                                  f"no plugin provides a cleanup policy named {name!r} "
                                  f"(known: {', '.join(sorted(known))})")

    def _check_table_catalog(self, config: LogConfig) -> None:
        """A table kept by the tier's own catalog commits with the tier's exclusive create: on
        a tier without one, the topic must name a catalog (ConfigError naming the keys)."""
        if not config["remote.log.table.enable"] or config.table_catalog_properties:
            return
        rlm = self._remote.manager()
        tier = tier_of(rlm.rlmm) or tier_of(rlm.rsm)
        if tier is not None and not tier.supports_exclusive_create:
            raise ConfigError("remote.log.table.enable",
                              f"the tier at {tier.root} ({type(tier.fs).__name__}) offers no "
                              f"exclusive create, which the tier's own table catalog commits "
                              f"with: name a catalog with remote.log.table.catalog.* (for "
                              f"example type=rest and uri=...)")

    def remote_unavailable(self, topic: str, partition: int) -> RemoteStorageError | None:
        """Why the partition's remote tier is unavailable (None when attached or not tiered)."""
        partition_log = self._logs.get((topic, partition))
        if (self._remote_detached is not None and partition_log is not None
                and partition_log.remote_storage_enabled):
            return partition_log.remote.error() if isinstance(
                partition_log.remote, UnavailableRemote) else self._remote_detached
        return self._remote.unavailable_error((topic, partition))

    def _topic_config_from_disk(self, directory: Path) -> LogConfig:
        overrides = read_properties_if_exists(directory / TOPIC_CONFIG_FILE)
        return self.config.topic_defaults.with_overrides(overrides)

    def _schedule_tasks(self) -> None:
        cfg = self.config
        self.scheduler.schedule("flush-dirty-logs", self.flush_dirty_logs,
                                delay_ms=cfg["log.flush.scheduler.interval.ms"],
                                period_ms=cfg["log.flush.scheduler.interval.ms"])
        self.scheduler.schedule("checkpoint-recovery-points", self.checkpoint_recovery_points,
                                delay_ms=cfg["log.flush.offset.checkpoint.interval.ms"],
                                period_ms=cfg["log.flush.offset.checkpoint.interval.ms"])
        self.scheduler.schedule("checkpoint-log-start-offsets", self.checkpoint_log_start_offsets,
                                delay_ms=cfg["log.flush.start.offset.checkpoint.interval.ms"],
                                period_ms=cfg["log.flush.start.offset.checkpoint.interval.ms"])
        self.scheduler.schedule("checkpoint-high-watermarks", self.checkpoint_high_watermarks,
                                delay_ms=cfg["replica.high.watermark.checkpoint.interval.ms"],
                                period_ms=cfg["replica.high.watermark.checkpoint.interval.ms"])
        self.scheduler.schedule("log-retention", self._retention_task,
                                delay_ms=cfg["log.retention.check.interval.ms"],
                                period_ms=cfg["log.retention.check.interval.ms"])
        if cfg["log.cleaner.enable"]:
            self.scheduler.schedule("log-cleaner", self._cleaner_task,
                                    delay_ms=cfg["log.cleaner.backoff.ms"],
                                    period_ms=cfg["log.cleaner.backoff.ms"])
        self.scheduler.schedule("remote-log-manager", self._tiering_task,
                                delay_ms=cfg["remote.log.manager.task.interval.ms"],
                                period_ms=cfg["remote.log.manager.task.interval.ms"])
        self.scheduler.schedule("remote-log-tail", self._tail_task,
                                delay_ms=cfg["remote.log.tail.check.interval.ms"],
                                period_ms=cfg["remote.log.tail.check.interval.ms"])

    # -- topics ----------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int | None = None,
                     config: Mapping[str, Any] | None = None, *,
                     topic_id: str | None = None) -> list[Log]:
        """Create ``partitions`` partition directories (spread over the log dirs) and return
        their logs. Config overrides are validated first and persisted with each partition.
        ``topic_id``: the id to record (a cluster's replicas share their topic's); new when
        None.

        All or nothing: when any step fails (a partition directory, the remote tier refusing
        the attach of a tiered topic), every partition created so far is closed and removed
        and the error is raised, so the topic can be created again."""
        filenames.validate_topic(name)
        count = self.config["num.partitions"] if partitions is None else partitions
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ConfigError("partitions", f"must be a positive integer, got {count!r}")
        if count - 1 > filenames.MAX_PARTITION:
            raise ConfigError("partitions", f"must be at most {filenames.MAX_PARTITION + 1}")
        overrides = dict(config or {})
        topic_config = self.config.topic_defaults.with_overrides(overrides)
        self._check_cleanup_policies(topic_config)
        check_topic_config(topic_config)
        with self._lock:
            self._check_open()
            if self.partitions(name):
                raise TopicExistsError(f"topic {name!r} already exists")
            if topic_config["remote.storage.enable"]:
                self._remote.manager()  # a configuration mistake fails before any change
                self._check_table_catalog(topic_config)
            new_id = topic_id or new_topic_id()

            def open_partition(_: int, directory: Path) -> Log:
                return self._open_new_partition(directory, topic_config, new_id, overrides)

            logs = self._create_partitions(name, range(count), open_partition)
            log.info("created topic %s with %d partition%s", name, count, "" if count == 1 else "s")
            return logs

    def _open_new_partition(self, directory: Path, topic_config: LogConfig,
                            topic_id: str | None, overrides: Mapping[str, Any]) -> Log:
        """Open an empty partition of a new (or growing) topic, writing the topic's own
        overrides beside it (only those: broker defaults may change later)."""
        if overrides:
            write_properties(directory / TOPIC_CONFIG_FILE, LogConfig(overrides).overrides)
        return Log.open(directory, topic_config, topic_id=topic_id, had_clean_shutdown=True,
                        **self._log_options())

    def create_partitions(self, name: str, count: int) -> list[Log]:
        """Grow topic ``name`` to ``count`` partitions (Kafka's CreatePartitions): the new
        ones get the topic's id and config overrides; returns their logs. All or nothing, as
        :meth:`create_topic`. ConfigError unless ``count`` is above the current count."""
        with self._lock:
            self._check_open()
            current = self.partitions(name)
            if not current:
                raise UnknownTopicOrPartitionError(f"unknown topic {name}")
            if not isinstance(count, int) or isinstance(count, bool) or count <= len(current):
                raise ConfigError("partitions", f"topic {name} has {len(current)} partitions: "
                                                f"the new count must be larger, got {count!r}")
            if count - 1 > filenames.MAX_PARTITION:
                raise ConfigError("partitions", f"must be at most {filenames.MAX_PARTITION + 1}")
            first = self._logs[(name, current[0])]
            overrides = self.topic_overrides(name)
            topic_config, topic_id = first.config, first.topic_id

            def open_partition(_: int, directory: Path) -> Log:
                return self._open_new_partition(directory, topic_config, topic_id, overrides)

            logs = self._create_partitions(name, range(max(current) + 1, count), open_partition)
            log.info("topic %s grown to %d partitions", name, count)
            return logs

    def _create_partitions(self, name: str, partitions: Iterable[int],
                           open_partition: Callable[[int, Path], Log], *,
                           before_attach: Callable[[list[Log]], None] | None = None
                           ) -> list[Log]:
        """All or nothing, under the manager's lock: a directory per partition (spread over
        the log dirs), its log opened by ``open_partition(partition, directory)`` and
        registered, then ``before_attach(logs)`` (a restore cuts the tier there), then the
        remote tier attached to the tiered ones. When any step fails
        (a directory, an open, the tier refusing the attach), every partition made so far is
        closed and removed and the error is raised, so the topic can be made again."""
        logs: list[Log] = []
        made: list[tuple[int, Path]] = []
        try:
            for p in partitions:
                directory = self._least_loaded_dir() / filenames.partition_dir_name(name, p)
                directory.mkdir(parents=True)
                made.append((p, directory))
                partition_log = open_partition(p, directory)
                self._logs[(name, p)] = partition_log
                logs.append(partition_log)
            if before_attach is not None:
                before_attach(logs)
            self._remote.attach(logs, isolate=False)
        except BaseException:
            self._undo_create(name, logs, made)
            raise
        return logs

    def _undo_create(self, name: str, logs: list[Log], made: list[tuple[int, Path]]) -> None:
        """Remove what a failed create or adopt made (its logs closed, its directories gone)."""
        for p, _ in made:
            self._logs.pop((name, p), None)
            self._remote.forget((name, p))
        for partition_log in logs:
            try:
                partition_log.close()
            except Exception:  # the directory goes anyway
                log.exception("%s: closing after a failed create", partition_log.directory)
        for _, directory in made:
            shutil.rmtree(directory, ignore_errors=True)
            fsync_dir(directory.parent)
        log.warning("creating topic %s failed: its %d partition directories were removed",
                    name, len(made))

    def adopt_topic(self, name: str, config: Mapping[str, Any] | None = None) -> list[Log]:
        """Take over a topic the remote tier holds and no log owns (one written by Spark's
        ``df.write.format("tierlog")``) and continue it at its end: :meth:`restore_topic`
        without a cut."""
        return self.restore_topic(name, config=config)

    def plan_restore(self, name: str, *, to_offset: int | None = None,
                     to_timestamp: int | None = None, force_takeover: bool = False,
                     download: Download | None = None, to_topic: str | None = None
                     ) -> RestorePlan:
        """What :meth:`restore_topic` with the same arguments would do, per partition: the
        cut, and the segments and records it would delete from the tier (RestorePlan).
        Changes nothing here or in the tier; raises what planning the restore raises (its
        refusals, and TierDamagedError naming a damaged object the restore relies on)."""
        filenames.validate_topic(name)
        if to_topic is not None:
            filenames.validate_topic(to_topic)
            if to_topic == name:
                raise ConfigError("to_topic", f"restoring {name!r} into a new topic needs a "
                                              f"name other than {name!r}")
        with self._lock:
            self._check_open()
            self._check_restorable(name if to_topic is None else to_topic)
            rlm = self._remote.manager()
            if to_topic is not None:
                self._check_new_in_tier(rlm, to_topic)
            return plan_restore(
                rlm.rlmm, rlm.rsm, name, time_ms=self._time_ms, to_offset=to_offset,
                to_timestamp=to_timestamp, force_takeover=force_takeover, download=download,
                owners=None if to_topic else {manager_owner(d) for d in self.dirs})

    def restore_topic(self, name: str, *, to_offset: int | None = None,
                      to_timestamp: int | None = None, force_takeover: bool = False,
                      config: Mapping[str, Any] | None = None,
                      download: Download | None = None, execute: bool = False,
                      allow_empty: bool = False, to_topic: str | None = None) -> list[Log]:
        """Rebuild topic ``name`` from the remote tier alone (tierlog.remote.ops.restore), with
        the tier's topic id, partitions, log start offset, leader epochs and producer state.

        Each partition is restored to the last stable cut (no transaction spans it, on a
        batch boundary) at or before ``to_offset`` (the first offset not restored) and
        ``to_timestamp`` (ms), else at or before the tier's end: its local log starts empty
        at the cut, or holds the bytes below the cut of the tier segment the cut falls in;
        reads below come from the tier, appends continue at the cut, producers keep
        deduplicating. The records below the cut of the segment the cut falls in are first
        uploaded to the tier as a segment of their own, then the tier's segments holding
        offsets at or above the cut are deleted from it (marked DELETE_SEGMENT_STARTED
        first, the highest first): a restore failing at any step loses no record below the
        cut, and running it again lands on the same cut. A restore that deletes from the
        tier runs only with ``execute`` (see :meth:`plan_restore` for what it would
        delete), and one leaving a partition empty only with ``allow_empty`` too
        (RestoreNotConfirmedError). With ``to_topic`` the restored state goes to a NEW topic
        of that name (a new topic id, the records below the cut copied under it in the
        tier) and the source topic's tier data is only read (tierlog.remote.ops.restore_fork).
        Before anything changes, the segments the restored log reads from the tier are
        checked (TierDamagedError names a damaged object). The tier does not
        record topic configs: ``config`` gives the overrides (``remote.storage.enable`` is
        set on top). The topic is then owned by this manager: a backfill refuses it.
        ``download(bytes)`` is called as segment bytes are fetched. All or nothing, as
        :meth:`create_topic`.

        TopicExistsError when the topic is here already (or, for ``to_topic``, in the
        tier); UnknownTopicOrPartitionError when the tier has none; PartitionOwnedError when
        another log owns a partition of it (``force_takeover`` takes it over, recording
        this manager as the owner); OffsetOutOfRangeError when the cut would be below the
        log start offset."""
        with self._lock:
            plan = self.plan_restore(name, to_offset=to_offset, to_timestamp=to_timestamp,
                                     force_takeover=force_takeover, download=download,
                                     to_topic=to_topic)
            return self.apply_restore(plan, config=config, execute=execute,
                                      allow_empty=allow_empty, to_topic=to_topic)

    def _check_new_in_tier(self, rlm: RemoteLogManager, to_topic: str) -> None:
        tier = tier_of(rlm.rlmm) or tier_of(rlm.rsm)
        if tier is not None:
            check_new_topic(rlm.rlmm, tier, to_topic, {manager_owner(d) for d in self.dirs})

    def _check_restorable(self, name: str) -> None:
        if self.partitions(name):
            raise TopicExistsError(f"topic {name!r} already exists in "
                                   f"{', '.join(map(str, self.dirs))}: a restore starts "
                                   f"from a data dir without it")

    def apply_restore(self, plan: RestorePlan, *, config: Mapping[str, Any] | None = None,
                      execute: bool = False, allow_empty: bool = False,
                      to_topic: str | None = None) -> list[Log]:
        """Carry out a plan :meth:`plan_restore` just made (with the same ``to_topic``), as
        :meth:`restore_topic` does: a plan deleting from the tier only with ``execute``, one
        leaving a partition empty only with ``allow_empty`` too (RestoreNotConfirmedError)."""
        name = plan.topic if to_topic is None else to_topic
        if to_topic is None:
            plan.confirm(execute=execute, allow_empty=allow_empty)
        with self._lock:
            self._check_open()
            self._check_restorable(name)
            return self._restore_planned(plan, name, config, to_topic)

    def _restore_planned(self, plan: RestorePlan, name: str, config: Mapping[str, Any] | None,
                         to_topic: str | None) -> list[Log]:
        overrides = {**dict(config or {}), "remote.storage.enable": True}
        topic_config = self.config.topic_defaults.with_overrides(overrides)
        self._check_cleanup_policies(topic_config)
        rlm = self._remote.manager()
        forked: list[RemoteLogSegmentMetadata] = []
        source = {s.tip.partition: s for s in plan.partitions}
        if to_topic is not None:
            self._check_new_in_tier(rlm, to_topic)
            plan = fork_plan(plan, to_topic)
        states = {s.tip.partition: s for s in plan.partitions}

        def open_partition(p: int, directory: Path) -> Log:
            state = states[p]
            snapshots: Callable[[str, str, int, int], bytes | None] = TierProducerSnapshots(
                self._remote.manager, self._lock)
            if to_topic is not None:  # its tier data (committed before the attach)
                forked.extend(copy_kept(rlm.rlmm, rlm.rsm, source[p], state,
                                        time_ms=self._time_ms,
                                        tier=tier_of(rlm.rlmm) or tier_of(rlm.rsm),
                                        owner=manager_owner(directory.parent)))
                src = source[p].tip  # the producer snapshot at the cut is the source's
                snapshots = partial(_source_snapshot, snapshots, src.topic_id, src.topic)
            write_properties(directory / TOPIC_CONFIG_FILE, LogConfig(overrides).overrides)
            seed_log_dir(directory, state,
                         index_interval_bytes=topic_config["index.interval.bytes"],
                         max_index_size=topic_config["segment.index.bytes"])
            partition_log = Log.open(
                directory, topic_config, topic_id=state.tip.topic_id,
                log_start_offset=state.log_start_offset,
                recovery_point=state.local_log_start,
                had_clean_shutdown=not state.local_bytes, remote_snapshots=snapshots,
                **self._log_options())
            partition_log.update_high_watermark(state.end_offset)
            return partition_log

        def cut(logs: list[Log]) -> None:
            forked[:] = commit_copies(rlm.rlmm, forked, time_ms=self._time_ms)
            # The records below each cut go to the tier as a segment of their own before
            # the segment they came from is deleted: the tier never lacks one.
            for partition_log in logs:
                state = states[partition_log.partition]
                if state.local_bytes:
                    partition_log.roll()  # the prefix closed at the cut, snapshot there
                forked.extend(filter(None, [commit_cut_prefix(rlm, partition_log, state)]))
            # The topic's table follows the cut before the segments above it leave the tier.
            cut_tables(tier_of(rlm.rlmm) or tier_of(rlm.rsm), list(states.values()),
                       topic_config.table_catalog_properties)
            cut_tier(rlm.rlmm, rlm.rsm, list(states.values()), time_ms=self._time_ms)

        try:
            logs = self._create_partitions(name, states, open_partition, before_attach=cut)
        except BaseException:
            if to_topic is not None:  # what was copied under the new topic goes too
                discard_fork(rlm.rlmm, rlm.rsm, forked, time_ms=self._time_ms)
            raise
        for log_dir in {lg.directory.parent for lg in logs}:
            self._write_checkpoints(log_dir, self._logs)  # the log start offsets survive a crash
        for state in plan.partitions:
            if state.taken_over is not None:
                log.warning("%s-%d: taking over from %s, as forced", name, state.tip.partition,
                            state.taken_over)
            if state.dropped:
                log.info("%s-%d: deleted %d segments (%d records) at or above offset %d "
                         "from the tier", name, state.tip.partition, len(state.dropped),
                         state.deleted_records, state.cut)
        log.info("restored topic %s (%d partitions) from the remote tier to offsets %s",
                 name, len(logs), ", ".join(str(lg.log_end_offset) for lg in logs))
        return logs

    def restore_all(self, *, to_timestamp: int | None = None, force_takeover: bool = False,
                    config: Mapping[str, Any] | None = None,
                    download: Download | None = None, execute: bool = False,
                    allow_empty: bool = False) -> dict[str, list[Log]]:
        """:meth:`restore_topic` for every topic the remote tier holds, in name order, each
        with the same ``to_timestamp``, ``force_takeover``, ``config``, ``execute`` and
        ``allow_empty``. Every topic is planned (and confirmed) before any is restored:
        TopicExistsError naming them, RestoreNotConfirmedError or TierDamagedError, before
        anything changes."""
        with self._lock:
            plans = self.plan_restore_all(to_timestamp=to_timestamp,
                                          force_takeover=force_takeover, download=download)
            for plan in plans:
                plan.confirm(execute=execute, allow_empty=allow_empty)
            return {plan.topic: self.apply_restore(plan, config=config, execute=execute,
                                                   allow_empty=allow_empty) for plan in plans}

    def plan_restore_all(self, *, to_timestamp: int | None = None,
                         force_takeover: bool = False, download: Download | None = None
                         ) -> list[RestorePlan]:
        """:meth:`plan_restore` of every topic the remote tier holds, in name order;
        TopicExistsError naming those the data dir holds, before anything is planned."""
        with self._lock:
            self._check_open()
            names = self.tier_topics()
            present = [n for n in names if self.partitions(n)]
            if present:
                raise TopicExistsError(f"topics {', '.join(present)} already exist here: a "
                                       f"restore starts from a data dir without them")
            return [self.plan_restore(n, to_timestamp=to_timestamp,
                                      force_takeover=force_takeover, download=download)
                    for n in names]

    def tier_topics(self) -> list[str]:
        """The names of the topics the remote tier holds."""
        rlm = self._remote.manager()
        tier = tier_of(rlm.rlmm) or tier_of(rlm.rsm)
        if tier is None:
            raise ConfigError("remote.storage.manager", "restoring needs a remote storage "
                                                        "whose tier tierlog can list")
        return tier_topics(tier)

    def _least_loaded_dir(self) -> Path:
        counts = {d: 0 for d in self.dirs}
        for partition_log in self._logs.values():
            counts[partition_log.directory.parent] = counts.get(partition_log.directory.parent, 0) + 1
        return min(self.dirs, key=lambda d: counts[d])

    def log(self, topic: str, partition: int) -> Log:
        try:
            return self._logs[(topic, partition)]
        except KeyError:
            raise UnknownTopicOrPartitionError(
                f"unknown topic or partition {topic}-{partition}"
            ) from None

    def partitions(self, topic: str) -> list[int]:
        # tuple() copies the keys at once: another thread may create a topic meanwhile.
        return sorted(p for t, p in tuple(self._logs) if t == topic)

    def topics(self) -> list[str]:
        return sorted({t for t, _ in tuple(self._logs)})

    def logs(self) -> dict[TopicPartition, Log]:
        return dict(self._logs)

    def topic_config(self, topic: str) -> LogConfig:
        partitions = self.partitions(topic)
        if not partitions:
            raise UnknownTopicOrPartitionError(f"unknown topic {topic}")
        return self._logs[(topic, partitions[0])].config

    def topic_overrides(self, topic: str) -> dict[str, Any]:
        """The topic's own config overrides (parsed), as persisted beside its partitions: not
        the broker's topic defaults, which its LogConfig merges in."""
        partitions = self.partitions(topic)
        if not partitions:
            raise UnknownTopicOrPartitionError(f"unknown topic {topic}")
        directory = self._logs[(topic, partitions[0])].directory
        return dict(LogConfig(read_properties_if_exists(directory / TOPIC_CONFIG_FILE)).overrides)

    def alter_topic_config(self, topic: str, set_configs: Mapping[str, Any] | None = None,
                           delete_configs: Iterable[str] = ()) -> LogConfig:
        """Change the topic's overrides (``set_configs`` added or replaced, ``delete_configs``
        removed: back to the broker default), as kafka-configs ``--alter`` does. Returns the
        new config.

        Everything is validated before anything changes (ConfigError naming the key); each
        partition's override file is then replaced atomically and its log reopened with the
        new config (a Log object taken before is closed: ask :meth:`log` again). Enabling
        ``remote.storage.enable`` attaches the remote tier; disabling it is refused, as Kafka
        refuses it."""
        set_configs = dict(set_configs or {})
        deleted = list(delete_configs)
        with self._lock:
            self._check_open()
            current = self.topic_overrides(topic)
            for key in deleted:
                if topic_config_key(key) is None:
                    raise ConfigError(key, "unknown topic configuration key")
                if key in set_configs:
                    raise ConfigError(key, "is both set and deleted")
            overrides = {k: v for k, v in {**current, **set_configs}.items()
                         if k not in deleted}
            own = LogConfig(overrides)
            new_config = self.check_topic_change(topic, self.topic_config(topic), own.overrides)
            for p in self.partitions(topic):
                self._reopen(topic, p, own.overrides, new_config)
            log.info("altered topic %s: set %s, deleted %s", topic,
                     ", ".join(sorted(set_configs)) or "nothing",
                     ", ".join(sorted(deleted)) or "nothing")
            return new_config

    def check_topic_change(self, topic: str, old_config: LogConfig,
                           overrides: Mapping[str, Any]) -> LogConfig:
        """The config topic ``topic`` would have with ``overrides`` (all of its own), checked
        as :meth:`alter_topic_config` checks it, without changing anything (a replicating
        node checks a change here before storing it for every replica): ConfigError naming
        the key."""
        new_config = self.config.topic_defaults.with_overrides(LogConfig(overrides).overrides)
        self._check_cleanup_policies(new_config)
        check_topic_config(new_config)
        if old_config["remote.storage.enable"] and not new_config["remote.storage.enable"]:
            raise ConfigError("remote.storage.enable",
                              f"cannot be disabled on topic {topic}, whose segments may "
                              f"already be in the remote tier (Kafka refuses it too)")
        if new_config["remote.storage.enable"]:
            self._remote.manager()  # a configuration mistake fails before any change
            self._check_table_catalog(new_config)
        return new_config

    def _reopen(self, topic: str, partition: int, overrides: Mapping[str, Any],
                config: LogConfig) -> None:
        """Persist a partition's overrides atomically and reopen its log with ``config``."""
        old = self._logs[(topic, partition)]
        path = old.directory / TOPIC_CONFIG_FILE
        if overrides:
            write_properties(path, overrides)
        elif path.exists():
            path.unlink()
            fsync_dir(old.directory)
        old.flush()
        recovery_point, start = old.recovery_point, old.log_start_offset
        high_watermark = old.high_watermark
        old.close()
        reopened = Log.open(old.directory, config, recovery_point=recovery_point,
                            log_start_offset=start, had_clean_shutdown=True,
                            **self._log_options())
        reopened.update_high_watermark(high_watermark)
        reopened.stats = old.stats  # the partition's counters go on (a reset reads as a gap)
        self._logs[(topic, partition)] = reopened
        self._remote.forget((topic, partition))
        self._remote.attach([reopened])

    def delete_topic(self, topic: str) -> None:
        """Delete the topic's remote data, then close its logs, rename their dirs to
        ``<dir>.<uuid>-delete`` and remove them in the background after
        ``file.delete.delay.ms``.

        The remote data goes first: when the tier fails (or is unavailable to a partition),
        RemoteStorageError is raised with the topic still in place, and deleting again
        finishes the job."""
        with self._lock:
            self._check_open()
            partitions = self.partitions(topic)
            if not partitions:
                raise UnknownTopicOrPartitionError(f"unknown topic {topic}")
            self._remote.delete_table([self._logs[(topic, p)] for p in partitions])
            for p in partitions:
                partition_log = self._logs[(topic, p)]
                if isinstance(partition_log.remote, UnavailableRemote):
                    raise RemoteStorageError(
                        f"cannot delete topic {topic}: {partition_log.remote.error()}")
                self._remote.delete_partition(partition_log)
            for p in partitions:
                partition_log = self._logs.pop((topic, p))
                delay = partition_log.config["file.delete.delay.ms"]
                partition_log.close()
                doomed = partition_log.directory.with_name(
                    f"{partition_log.directory.name}.{uuid.uuid4().hex}{filenames.DELETE_DIR_SUFFIX}"
                )
                os.replace(partition_log.directory, doomed)
                self.scheduler.schedule(f"delete-{doomed.name}",
                                        partial(shutil.rmtree, doomed, ignore_errors=True),
                                        delay_ms=delay)
            for log_dir in self.dirs:
                self._write_checkpoints(log_dir, self._logs)
            log.info("deleted topic %s", topic)

    # -- background work -------------------------------------------------------------

    def cleanup_logs(self, policies: Iterable[str] | None = None) -> dict[str, list[CleanupResult]]:
        """Run each log's cleanup policies (``cleanup.policy``) once; ``policies`` narrows
        which (the retention task runs all but ``compact``, the cleaner task ``compact``).
        Returns the results by partition directory name."""
        wanted = None if policies is None else set(policies)
        registries = self.plugins.registries
        now = self._time_ms()
        results: dict[str, list[CleanupResult]] = {}
        for partition_log in list(self._logs.values()):
            if partition_log.closed:
                continue
            for name in partition_log.config["cleanup.policy"]:
                if wanted is not None and name not in wanted:
                    continue
                started = perf_ns()
                result = registries.cleanup_policy(name).clean(partition_log, now)
                partition_log.stats.record_cleanup(result, perf_ns() - started)
                results.setdefault(partition_log.directory.name, []).append(result)
        return results

    def _retention_task(self) -> None:
        known = set(self.plugins.registries.cleanup_policies) - {"compact"}
        self.cleanup_logs(known)

    def _cleaner_task(self) -> None:
        self.cleanup_logs({"compact"})

    def tiered_logs(self) -> list[Log]:
        """The open logs with the remote tier attached (not those it is unavailable to)."""
        return self._remote.tiered_logs()

    def copy_candidates(self) -> int:
        """How many closed segments are ready to be copied to the remote tier now."""
        return self._remote.copy_candidates()

    def tier_now(self, progress: Progress | None = None) -> dict[str, TierResult]:
        """One tiering run: copy eligible segments of every tiered log to the remote tier,
        enforce remote retention, then local retention (which deletes only copied segments).
        ``progress(event, detail)`` is called with ``("copied", metadata)`` per segment."""
        results = self._remote.tier_now(progress)
        if results or self._remote.rlm is not None:
            self.cleanup_logs({"delete"})
        return results

    def _tiering_task(self) -> None:
        """The scheduler's tiering task (ManagerRemote.submit_tiering); local retention of
        copied segments is the retention task's job."""
        self._remote.submit_tiering()

    def _tail_task(self) -> None:
        self._remote.submit_due_tails()

    def publish_tail_now(self) -> dict[str, bool]:
        """Publish the tail of every tiered log whose topic has ``remote.log.tail.ms`` >= 0
        now, on the caller's thread, whatever its interval; returns, by directory name,
        whether its tail manifest was replaced."""
        return self._remote.publish_tail_now()

    def await_tail_publishing(self, timeout_s: float | None = None) -> bool:
        """Wait until the tail publishes the scheduler submitted so far have finished (for
        callers driving the scheduler, e.g. tests); False on timeout."""
        return self._remote.await_tail_publishing(timeout_s)

    def flush_dirty_logs(self) -> None:
        """Flush every log whose oldest unflushed data is older than its flush.ms."""
        now = self._time_ms()
        for partition_log in list(self._logs.values()):
            partition_log.maybe_flush_by_time(now)

    def _write_checkpoints(self, log_dir: Path, logs: Mapping[TopicPartition, Log],
                           checkpoints: Iterable[tuple[str, Callable[[CheckpointedLog], int]]]
                           = ALL_CHECKPOINTS) -> None:
        """write_checkpoints of ``log_dir``, one writer at a time (another thread's create
        or delete may change ``logs`` meanwhile: the writer takes a copy)."""
        with self._checkpoint_lock:
            write_checkpoints(log_dir, dict(logs), checkpoints)

    def checkpoint_recovery_points(self) -> None:
        """Write every dir's recovery-point checkpoint, then drop the producer snapshots
        that recovery no longer needs (Kafka's deleteSnapshotsAfterRecoveryPointCheckpoint)."""
        for log_dir in self.dirs:
            self._write_checkpoints(log_dir, self._logs, [RECOVERY_POINTS])
        for partition_log in list(self._logs.values()):
            if not partition_log.closed:
                partition_log.delete_snapshots_after_recovery_point_checkpoint()

    def checkpoint_log_start_offsets(self) -> None:
        for log_dir in self.dirs:
            self._write_checkpoints(log_dir, self._logs, [LOG_START_OFFSETS])

    def checkpoint_high_watermarks(self) -> None:
        for log_dir in self.dirs:
            self._write_checkpoints(log_dir, self._logs, [HIGH_WATERMARKS])

    # -- shutdown --------------------------------------------------------------------

    def close(self) -> None:
        """Stop background work, flush and close every log, write the checkpoints and the
        clean-shutdown marker (so the next open trusts the files). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self.scheduler.shutdown()
            # Remote work stops first, waiting a bounded time for a hung upload.
            self._remote.close()
            if self.read_only:  # nothing to write: the files are closed as they are
                for partition_log in self._logs.values():
                    partition_log.close()
                self._closed = True
                return
            for partition_log in self._logs.values():
                partition_log.flush()
            for log_dir in self.dirs:
                self._write_checkpoints(log_dir, self._logs)
            for partition_log in self._logs.values():
                partition_log.close()
            for log_dir in self.dirs:
                atomic_write_text(log_dir / filenames.CLEAN_SHUTDOWN_FILE,
                                  json.dumps({"version": 0, "brokerEpoch": 0},
                                             separators=(",", ":")))
            self._closed = True
            self._release_dirs()  # last: the marker is written under the lock
            log.info("log manager closed cleanly")

    def _check_open(self) -> None:
        """Before a change of topics: the manager is open, and not read-only."""
        if self._closed:
            raise TierlogError("the log manager is closed")
        if self.read_only:
            raise TierlogError(f"the log manager of {', '.join(map(str, self.dirs))} was "
                               f"opened read-only: it changes no topic")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _deleted_topic(name: str) -> str:
    """The topic of a deleted partition's directory, ``<topic>-<partition>.<uuid>-delete``."""
    partition_dir = name.removesuffix(filenames.DELETE_DIR_SUFFIX).rpartition(".")[0]
    return partition_dir.rpartition("-")[0] or name
