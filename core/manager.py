"""LogManager: every partition of one or more log dirs, their checkpoints and background work.

Loads partitions in parallel at open, creates and deletes topics, writes Kafka's log-dir
checkpoints and the clean-shutdown marker, and runs flush/checkpoint tasks on a Scheduler.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tierlog import filenames
from tierlog.atomic import atomic_write_text, fsync_dir
from tierlog.checkpoint import OffsetCheckpointFile
from tierlog.config import LogConfig
from tierlog.errors import ConfigError, InvalidTopicError, LogDirectoryError, TierlogError
from tierlog.cleaner.result import CleanupResult
from tierlog.log import Log
from tierlog.manager_config import ManagerConfig
from tierlog.partition_metadata import new_topic_id
from tierlog.plugin_manager import get_plugins
from tierlog.remote.factory import build_remote_log_manager
from tierlog.remote.rlm import RemoteLogManager, TierResult
from tierlog.scheduler import Scheduler, system_time_ms

log = logging.getLogger(__name__)

#: Per-partition file holding the topic's config overrides (Kafka keeps them in its metadata log).
TOPIC_CONFIG_FILE = "topic-config.properties"

TopicPartition = tuple[str, int]


class UnknownTopicOrPartitionError(TierlogError, KeyError):
    """No such topic or partition in this LogManager."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class TopicExistsError(TierlogError, ValueError):
    """create_topic for a topic that already exists."""


class LogManager:
    """The logs of one tierlog node.

    Thread-safe: topic creation and deletion hold the manager's lock; each Log guards itself.
    Use as a context manager, or call :meth:`close`, so the clean-shutdown marker is written
    and the next open skips recovery.
    """

    def __init__(self, dirs: Sequence[Path], config: ManagerConfig, *,
                 time_ms: Callable[[], int], scheduler: Scheduler) -> None:
        self.dirs = list(dirs)
        self.config = config
        self._time_ms = time_ms
        self.scheduler = scheduler
        self._lock = threading.RLock()
        self._logs: dict[TopicPartition, Log] = {}
        self._closed = False
        self.clean_shutdown: dict[Path, bool] = {}
        self.plugins = get_plugins()
        #: Tiering, once a topic enables remote.storage.enable (None until then).
        self.remote_log_manager: RemoteLogManager | None = None

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
    ) -> LogManager:
        """Open every partition under the log dirs (recovering after a crash) and start the
        background tasks. Pass ``start_scheduler=False`` and drive ``mgr.scheduler.run_due()``
        with a fake clock in tests."""
        if isinstance(dirs, (str, os.PathLike)):
            dirs = [dirs]
        paths = [Path(d) for d in dirs]
        if not paths:
            raise ConfigError("log.dirs", "at least one log directory is required")
        clock = time_ms or system_time_ms
        manager = cls(paths, ManagerConfig(config), time_ms=clock,
                      scheduler=scheduler or Scheduler(clock))
        manager._load_all()
        manager._attach_tiered_logs(manager._logs.values())
        manager._schedule_tasks()
        if start_scheduler:
            manager.scheduler.start()
        return manager

    def _load_all(self) -> None:
        threads = self.config["num.recovery.threads.per.data.dir"]
        jobs: list[tuple[Path, Path, Mapping[TopicPartition, int], Mapping[TopicPartition, int]]] = []
        for log_dir in self.dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
            marker = log_dir / filenames.CLEAN_SHUTDOWN_FILE
            self.clean_shutdown[log_dir] = marker.exists()
            if self.clean_shutdown[log_dir]:
                # Kafka (KAFKA-10471) removes the marker before loading: loading may change
                # files, and a crash from here on must count as unclean.
                marker.unlink()
                fsync_dir(log_dir)
            recovery = OffsetCheckpointFile(log_dir / filenames.RECOVERY_POINT_CHECKPOINT).read()
            starts = OffsetCheckpointFile(log_dir / filenames.LOG_START_OFFSET_CHECKPOINT).read()
            for child in sorted(log_dir.iterdir()):
                if not child.is_dir():
                    continue
                if child.name.endswith(filenames.DELETE_DIR_SUFFIX):
                    log.info("removing %s left by an earlier topic deletion", child)
                    shutil.rmtree(child, ignore_errors=True)
                    continue
                try:
                    filenames.parse_partition_dir(child.name)
                except (LogDirectoryError, InvalidTopicError):
                    continue  # not a partition directory (e.g. a remote index cache)
                jobs.append((log_dir, child, recovery, starts))
        highwater = {}
        for log_dir in self.dirs:
            highwater.update(
                OffsetCheckpointFile(log_dir / filenames.REPLICATION_OFFSET_CHECKPOINT).read()
            )
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
            if tp in highwater:
                partition_log.update_high_watermark(highwater[tp])
        log.info("loaded %d partitions from %s", len(self._logs),
                 ", ".join(str(d) for d in self.dirs))

    def _load_partition(self, log_dir: Path, directory: Path,
                        recovery: Mapping[TopicPartition, int],
                        starts: Mapping[TopicPartition, int]) -> tuple[TopicPartition, Log]:
        tp = filenames.parse_partition_dir(directory.name)
        config = self._topic_config_from_disk(directory)
        self._check_cleanup_policies(config)
        partition_log = Log.open(
            directory, config, recovery_point=recovery.get(tp, 0),
            log_start_offset=starts.get(tp, 0), had_clean_shutdown=self.clean_shutdown[log_dir],
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

    def _attach_tiered_logs(self, logs: Iterable[Log]) -> None:
        tiered = [lg for lg in logs if lg.remote_storage_enabled]
        if not tiered:
            return
        if self.remote_log_manager is None:
            self.remote_log_manager = build_remote_log_manager(
                self.config, self.plugins.registries, self.dirs[0], self._time_ms,
                self.plugins.hook)
        for partition_log in tiered:
            self.remote_log_manager.attach(partition_log)

    def _topic_config_from_disk(self, directory: Path) -> LogConfig:
        overrides = _read_properties(directory / TOPIC_CONFIG_FILE)
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

    # -- topics ----------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int | None = None,
                     config: Mapping[str, Any] | None = None) -> list[Log]:
        """Create ``partitions`` partition directories (spread over the log dirs) and return
        their logs. Config overrides are validated first and persisted with each partition."""
        filenames.validate_topic(name)
        count = self.config["num.partitions"] if partitions is None else partitions
        if not isinstance(count, int) or count < 1:
            raise ConfigError("partitions", f"must be a positive integer, got {count!r}")
        overrides = dict(config or {})
        topic_config = self.config.topic_defaults.with_overrides(overrides)
        self._check_cleanup_policies(topic_config)
        with self._lock:
            self._check_open()
            if self.partitions(name):
                raise TopicExistsError(f"topic {name!r} already exists")
            topic_id = new_topic_id()
            logs = []
            for p in range(count):
                log_dir = self._least_loaded_dir()
                directory = log_dir / filenames.partition_dir_name(name, p)
                directory.mkdir(parents=True)
                if overrides:
                    # Only the topic's own overrides: broker defaults may change later.
                    _write_properties(directory / TOPIC_CONFIG_FILE, LogConfig(overrides).overrides)
                partition_log = Log.open(directory, topic_config, topic_id=topic_id,
                                         had_clean_shutdown=True, **self._log_options())
                self._logs[(name, p)] = partition_log
                logs.append(partition_log)
            self._attach_tiered_logs(logs)
            log.info("created topic %s with %d partitions", name, count)
            return logs

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
        return sorted(p for t, p in self._logs if t == topic)

    def topics(self) -> list[str]:
        return sorted({t for t, _ in self._logs})

    def logs(self) -> dict[TopicPartition, Log]:
        return dict(self._logs)

    def topic_config(self, topic: str) -> LogConfig:
        partitions = self.partitions(topic)
        if not partitions:
            raise UnknownTopicOrPartitionError(f"unknown topic {topic}")
        return self._logs[(topic, partitions[0])].config

    def delete_topic(self, topic: str) -> None:
        """Close the topic's logs, rename their dirs to ``<dir>.<uuid>-delete`` and remove them
        in the background after ``file.delete.delay.ms``."""
        with self._lock:
            partitions = self.partitions(topic)
            if not partitions:
                raise UnknownTopicOrPartitionError(f"unknown topic {topic}")
            for p in partitions:
                partition_log = self._logs.pop((topic, p))
                if partition_log.remote is not None and self.remote_log_manager is not None:
                    self.remote_log_manager.delete_partition(partition_log)
                delay = partition_log.config["file.delete.delay.ms"]
                partition_log.close()
                doomed = partition_log.directory.with_name(
                    f"{partition_log.directory.name}.{uuid.uuid4().hex}{filenames.DELETE_DIR_SUFFIX}"
                )
                os.replace(partition_log.directory, doomed)
                self.scheduler.schedule(f"delete-{doomed.name}",
                                        lambda d=doomed: shutil.rmtree(d, ignore_errors=True),
                                        delay_ms=delay)
            for log_dir in self.dirs:
                self._write_checkpoints(log_dir)
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
                result = registries.cleanup_policy(name).clean(partition_log, now)
                results.setdefault(partition_log.directory.name, []).append(result)
        return results

    def _retention_task(self) -> None:
        known = set(self.plugins.registries.cleanup_policies) - {"compact"}
        self.cleanup_logs(known)

    def _cleaner_task(self) -> None:
        self.cleanup_logs({"compact"})

    def tiered_logs(self) -> list[Log]:
        return [lg for lg in self._logs.values() if lg.remote is not None and not lg.closed]

    def copy_candidates(self) -> int:
        """How many closed segments are ready to be copied to the remote tier now."""
        rlm = self.remote_log_manager
        return 0 if rlm is None else sum(len(rlm.copy_candidates(lg)) for lg in self.tiered_logs())

    def tier_now(self, progress: Callable[[str, Any], None] | None = None) -> dict[str, TierResult]:
        """One tiering run: copy eligible segments of every tiered log to the remote tier,
        enforce remote retention, then local retention (which deletes only copied segments).
        ``progress(event, detail)`` is called with ``("copied", metadata)`` per segment."""
        rlm = self.remote_log_manager
        if rlm is None:
            return {}
        logs = self.tiered_logs()
        results = rlm.tier(logs, progress)
        self.cleanup_logs({"delete"})
        return results

    def _tiering_task(self) -> None:
        """The scheduler's tiering task: it only submits each tiered log's run to the
        RemoteLogManager's own threads (skipping one whose last run is still going), so a
        slow or hung remote tier never holds up the flush, retention and checkpoint tasks.
        Local retention of copied segments is the retention task's job."""
        rlm = self.remote_log_manager
        if rlm is not None:
            rlm.submit_tiering(self.tiered_logs())

    def flush_dirty_logs(self) -> None:
        """Flush every log whose oldest unflushed data is older than its flush.ms."""
        now = self._time_ms()
        for partition_log in list(self._logs.values()):
            partition_log.maybe_flush_by_time(now)

    def checkpoint_recovery_points(self) -> None:
        """Write every dir's recovery-point checkpoint, then drop the producer snapshots
        that recovery no longer needs (Kafka's deleteSnapshotsAfterRecoveryPointCheckpoint)."""
        for log_dir in self.dirs:
            self._checkpoint(log_dir, filenames.RECOVERY_POINT_CHECKPOINT,
                             lambda lg: lg.recovery_point)
        for partition_log in list(self._logs.values()):
            if not partition_log.closed:
                partition_log.delete_snapshots_after_recovery_point_checkpoint()

    def checkpoint_log_start_offsets(self) -> None:
        for log_dir in self.dirs:
            self._checkpoint(log_dir, filenames.LOG_START_OFFSET_CHECKPOINT,
                             lambda lg: lg.log_start_offset)

    def checkpoint_high_watermarks(self) -> None:
        for log_dir in self.dirs:
            self._checkpoint(log_dir, filenames.REPLICATION_OFFSET_CHECKPOINT,
                             lambda lg: lg.high_watermark)

    def _checkpoint(self, log_dir: Path, name: str, value: Callable[[Log], int]) -> None:
        offsets = {
            tp: value(lg) for tp, lg in list(self._logs.items())
            if lg.directory.parent == log_dir and not lg.closed
        }
        OffsetCheckpointFile(log_dir / name).write(offsets)

    def _write_checkpoints(self, log_dir: Path) -> None:
        self._checkpoint(log_dir, filenames.RECOVERY_POINT_CHECKPOINT, lambda lg: lg.recovery_point)
        self._checkpoint(log_dir, filenames.LOG_START_OFFSET_CHECKPOINT,
                         lambda lg: lg.log_start_offset)
        self._checkpoint(log_dir, filenames.REPLICATION_OFFSET_CHECKPOINT,
                         lambda lg: lg.high_watermark)

    # -- shutdown --------------------------------------------------------------------

    def close(self) -> None:
        """Stop background work, flush and close every log, write the checkpoints and the
        clean-shutdown marker (so the next open trusts the files). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self.scheduler.shutdown()
            # Remote work stops first, waiting a bounded time for a hung upload.
            if self.remote_log_manager is not None:
                self.remote_log_manager.close()
            for partition_log in self._logs.values():
                partition_log.flush()
            for log_dir in self.dirs:
                self._write_checkpoints(log_dir)
            for partition_log in self._logs.values():
                partition_log.close()
            for log_dir in self.dirs:
                atomic_write_text(log_dir / filenames.CLEAN_SHUTDOWN_FILE,
                                  json.dumps({"version": 0, "brokerEpoch": 0},
                                             separators=(",", ":")))
            self._closed = True
            log.info("log manager closed cleanly")

    def _check_open(self) -> None:
        if self._closed:
            raise TierlogError("the log manager is closed")

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_properties(path: Path) -> dict[str, str]:
    """Kafka's ``.properties`` format: ``key=value`` lines, ``#``/``!`` comments."""
    if not path.exists():
        return {}
    out = {}
    for number, line in enumerate(path.read_text("utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, sep, value = line.partition(":")
        if not sep:
            raise ConfigError(key, f"{path}:{number}: expected key=value")
        out[key.strip()] = value.strip()
    return out


def _write_properties(path: Path, values: Mapping[str, Any]) -> None:
    lines = []
    for key, value in sorted(values.items()):
        if isinstance(value, tuple):
            value = ",".join(value)
        elif isinstance(value, bool):
            value = str(value).lower()
        lines.append(f"{key}={value}\n")
    atomic_write_text(path, "".join(lines))
