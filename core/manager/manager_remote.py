"""ManagerRemote: what a LogManager owns of the remote tier.

The RemoteLogManager (built on first need, when a topic enables ``remote.storage.enable``),
the partitions the tier could not be attached to (each left with an UnavailableRemote that
reports why) and their retries, and the tiering and tail-publishing work the manager's
scheduler submits. The LogManager owns the logs and their lifecycle; this part only attaches
the tier to them and runs the tier's work over them, so a slow or failing tier stays here.

On a replicating node (its manager keeps no automatic high watermark) a partition's copies,
tail publishes and remote retention run only while the node leads it (:meth:`set_role`, told
by the replica manager) and holds its claim of the tier at that leader epoch; every partition
starts as not led. A follower learns how far its leader has tiered (one GET of the manifest
each tiering tick), so its local retention drops what the tier holds.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from tierlog.config import LONG_MAX
from tierlog.errors import CopyLagExceededError, RemoteStorageError, TierFencedError
from tierlog.log.log import Log
from tierlog.manager.manager_config import ManagerConfig
from tierlog.plugin_manager import PluginHost
from tierlog.remote.rlm.factory import build_remote_log_manager
from tierlog.remote.rlm.remote_reader import topic_id_partition
from tierlog.remote.rlm.rlm import Progress, RemoteLogManager, TierResult
from tierlog.remote.rlm.unavailable import UnavailableRemote

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
#: What a remote tier raises when it is unreachable or holds a corrupt object.
REMOTE_FAILURES = (RemoteStorageError, OSError)
#: At most one copy-lag warning per partition per this many milliseconds.
COPY_LAG_WARNING_INTERVAL_MS = 60_000


class ManagerRemote:
    """The remote tier of one LogManager's logs. ``logs()`` returns the manager's open logs
    by topic-partition (read, never changed here). Thread-safe: building the
    RemoteLogManager holds a lock, and attaches run outside the manager's lock."""

    def __init__(self, config: ManagerConfig, plugins: PluginHost, state_dir: Path,
                 time_ms: Callable[[], int],
                 logs: Callable[[], Mapping[TopicPartition, Log]]) -> None:
        self._config = config
        self._plugins = plugins
        self._state_dir = state_dir
        self._time_ms = time_ms
        self._logs = logs
        #: Tiering, once a topic enables remote.storage.enable (None until then).
        self.rlm: RemoteLogManager | None = None
        #: Tiered partitions whose remote tier could not be attached, and why.
        self._unavailable: dict[TopicPartition, UnavailableRemote] = {}
        self._build_lock = threading.Lock()
        #: The scheduler's retries of unavailable partitions run here: attaching reads the
        #: tier, which must never hold up the scheduler's flush and checkpoint tasks.
        self._reattach_pool = ThreadPoolExecutor(1, thread_name_prefix="tierlog-reattach")
        self._reattach: Future[list[Log]] | None = None
        #: remote.log.copy.lag.max.bytes, and when each partition's lag was last warned of.
        self._copy_lag_max = config["remote.log.copy.lag.max.bytes"]
        self._lag_warned: dict[TopicPartition, int] = {}
        #: Replicated partitions (a replicating node keeps its high watermarks itself): the
        #: ones this node leads, with the leader epoch and the owner name it leads them as,
        #: and those whose claim found a newer leader (left until told of a new epoch).
        self.replicated = not config["auto.high.watermark"]
        self._roles: dict[TopicPartition, tuple[int, str]] = {}
        self._stale: dict[TopicPartition, int] = {}
        #: The last leadership of each partition this node gave up (a deleted topic's
        #: partitions are given up before they are deleted: their last leader deletes the
        #: remote data, if no newer leader owns the tier).
        self._last_led: dict[TopicPartition, tuple[int, str]] = {}
        self._roles_lock = threading.Lock()
        self._follow: Future[None] | None = None

    def manager(self) -> RemoteLogManager:
        """The RemoteLogManager, built on first call (a ConfigError there is every tiered
        partition's, so callers check it before changing anything)."""
        with self._build_lock:
            if self.rlm is None:
                self.rlm = build_remote_log_manager(
                    self._config, self._plugins.registries, self._state_dir, self._time_ms,
                    self._plugins.events)
            return self.rlm

    # -- attaching -------------------------------------------------------------------

    def attach(self, logs: Iterable[Log], *, isolate: bool = True) -> None:
        """Attach the remote tier to every tiered log among ``logs``. With ``isolate``, a
        partition whose attach fails on the tier (a corrupt or unreadable object) is logged
        and left with an UnavailableRemote that reports the failure, and the others attach;
        without it the failure is raised."""
        tiered = [lg for lg in logs if lg.remote_storage_enabled]
        if not tiered:
            return
        try:
            rlm = self.manager()
        except REMOTE_FAILURES as exc:
            if not isolate:
                raise
            for partition_log in tiered:
                self._mark_unavailable(partition_log, exc)
            return
        for partition_log in tiered:
            try:
                rlm.attach(partition_log)
            except REMOTE_FAILURES as exc:
                if not isolate:
                    raise
                self._mark_unavailable(partition_log, exc)
            else:
                self.forget((partition_log.topic, partition_log.partition))

    def _mark_unavailable(self, partition_log: Log, exc: BaseException) -> None:
        name = partition_log.directory.name
        log.error("%s: remote tier unavailable, the partition opens without it (remote reads "
                  "and tiering report this): %s", name, exc)
        unavailable = UnavailableRemote(name, exc)
        partition_log.attach_remote(unavailable, partition_log.highest_offset_in_remote)
        self._unavailable[(partition_log.topic, partition_log.partition)] = unavailable

    def forget(self, tp: TopicPartition) -> None:
        """Drop what is known of a partition being closed or reopened."""
        self._unavailable.pop(tp, None)

    def unavailable_error(self, tp: TopicPartition) -> RemoteStorageError | None:
        """Why the partition's remote tier is unavailable (None when attached or not tiered)."""
        unavailable = self._unavailable.get(tp)
        return None if unavailable is None else unavailable.error()

    def retry_unavailable(self) -> list[Log]:
        """Attach again the partitions the remote tier was unavailable to (the failure may
        have passed); returns them (those still failing keep their UnavailableRemote)."""
        logs = self._logs()
        retried = [lg for tp in list(self._unavailable)
                   if (lg := logs.get(tp)) is not None and not lg.closed]
        self.attach(retried)  # no lock held: attaching reads the tier
        return retried

    # -- replicated partitions: the leader tiers ---------------------------------------

    def set_role(self, tp: TopicPartition, leader_epoch: int | None, owner: str) -> bool:
        """This node leads ``tp`` at ``leader_epoch`` as ``owner`` (``node-<id>``), or no
        longer leads it (None). A new leader claims the partition's tier at once (its first
        tier action reads the manifest and stamps it with its epoch); returns whether it
        tiers the partition now (False: the tier failed, tried again each tiering tick, or
        a newer leader owns it). Blocking: it reads and writes the tier."""
        with self._roles_lock:
            self._stale.pop(tp, None)
            if leader_epoch is None:
                if tp in self._roles:
                    self._last_led[tp] = self._roles.pop(tp)
            else:
                self._roles[tp] = (leader_epoch, owner)
        partition_log = self._logs().get(tp)
        rlm = self.rlm
        if partition_log is None or rlm is None or not partition_log.remote_storage_enabled:
            return False
        if leader_epoch is None:
            rlm.release(partition_log)
            return False
        return self._claim(tp, partition_log, rlm, leader_epoch, owner)

    def _claim(self, tp: TopicPartition, partition_log: Log, rlm: RemoteLogManager,
               leader_epoch: int, owner: str) -> bool:
        name = partition_log.directory.name
        try:
            highest = rlm.claim(partition_log, leader_epoch, owner)
        except TierFencedError as exc:
            with self._roles_lock:
                if self._roles.get(tp, (None,))[0] == leader_epoch:
                    self._stale[tp] = leader_epoch
            log.warning("%s: not tiering it at leader epoch %d: %s", name, leader_epoch, exc)
            return False
        except REMOTE_FAILURES as exc:
            log.warning("%s: the claim of its tier at leader epoch %d failed (tried again at "
                        "the next tiering tick): %s", name, leader_epoch, exc)
            return False
        log.info("%s: %s tiers the partition at leader epoch %d (the tier holds offsets up "
                 "to %d)", name, owner, leader_epoch, highest)
        return True

    def leading_logs(self) -> list[Log]:
        """The tiered logs whose tier this node writes: all of them, but on a replicating node
        only those it leads and holds the claim of."""
        logs = self.tiered_logs()
        rlm = self.rlm
        if not self.replicated or rlm is None:
            return logs
        with self._roles_lock:
            roles = set(self._roles)
        return [lg for lg in logs if (lg.topic, lg.partition) in roles and rlm.leads(lg)]

    def _follow_roles(self) -> None:
        """A tiering tick on a replicating node (on the retry thread, never the scheduler's):
        claim again the partitions this node leads whose claim failed or was lost (a write
        that lost its compare-and-swap: the tier is read again, and a newer leader found
        there stops it), and learn how far the leaders of the others have tiered."""
        rlm = self.rlm
        if rlm is None:
            return
        with self._roles_lock:
            roles = {tp: role for tp, role in self._roles.items() if tp not in self._stale}
        for partition_log in self.tiered_logs():
            tp = (partition_log.topic, partition_log.partition)
            try:
                if tp in roles:
                    if not rlm.leads(partition_log):
                        self._claim(tp, partition_log, rlm, *roles[tp])
                else:
                    rlm.follow_tier(partition_log)
            except REMOTE_FAILURES as exc:
                log.warning("%s: could not read its tier's manifest: %s",
                            partition_log.directory.name, exc)

    # -- the tier's work -------------------------------------------------------------

    def tiered_logs(self) -> list[Log]:
        """The open logs with the remote tier attached (not those it is unavailable to)."""
        return [lg for lg in self._logs().values() if lg.remote is not None and not lg.closed
                and not isinstance(lg.remote, UnavailableRemote)]

    def copy_candidates(self) -> int:
        """How many closed segments are ready to be copied to the remote tier now."""
        rlm = self.rlm
        return 0 if rlm is None else sum(len(rlm.copy_candidates(lg))
                                         for lg in self.leading_logs())

    def update_copy_lag(self) -> dict[str, int]:
        """Measure each tiered log's local bytes not yet copied to the tier; refuse client
        appends (CopyLagExceededError) of a log over ``remote.log.copy.lag.max.bytes``,
        accept them again below it, and warn (at most once a minute per partition) of a lag
        that grows while its tiering fails or is over the limit. Returns the lags by
        directory name. Run by the scheduler's tiering and tail tasks."""
        rlm = self.rlm
        if rlm is None:
            return {}
        now = self._time_ms()
        lags = {}
        for partition_log in self.tiered_logs():
            lag = rlm.copy_lag_bytes(partition_log)
            name = partition_log.directory.name
            lags[name] = lag
            over = lag > self._copy_lag_max
            failing = rlm.retries.attempts(topic_id_partition(partition_log)) > 0
            if over != (partition_log.copy_lag_error is not None):
                partition_log.set_copy_lag_error(CopyLagExceededError(
                    f"{name}: {lag} local bytes not yet copied to the remote tier exceed "
                    f"remote.log.copy.lag.max.bytes={self._copy_lag_max}; appends are "
                    f"refused until tiering catches up (retriable)") if over else None)
            tp = (partition_log.topic, partition_log.partition)
            if (over or failing) and lag > 0:
                if now - self._lag_warned.get(tp, -COPY_LAG_WARNING_INTERVAL_MS) \
                        >= COPY_LAG_WARNING_INTERVAL_MS:
                    self._lag_warned[tp] = now
                    log.warning("%s: %d local bytes not yet copied to the remote tier (%s)",
                                name, lag, "appends refused: over remote.log.copy.lag.max."
                                f"bytes={self._copy_lag_max}" if over
                                else "its tiering is failing; local data grows")
            else:
                self._lag_warned.pop(tp, None)
        return lags

    def tier_now(self, progress: Progress | None = None) -> dict[str, TierResult]:
        """One tiering run over every tiered log, on the caller's thread; a partition the
        tier is still unavailable to reports why."""
        unavailable = self.retry_unavailable()
        rlm = self.rlm
        if rlm is not None and self.replicated:
            self._follow_roles()
        results = {} if rlm is None else rlm.tier(self.leading_logs(), progress)
        self.update_copy_lag()
        for partition_log in unavailable:
            if isinstance(partition_log.remote, UnavailableRemote):
                results[partition_log.directory.name] = TierResult(
                    errors=[str(partition_log.remote.error())])
        return results

    def submit_tiering(self) -> None:
        """The scheduler's tiering task: it only submits each tiered log's run to the
        RemoteLogManager's own threads (skipping one whose last run is still going), so a
        slow or hung remote tier never holds up the flush, retention and checkpoint tasks."""
        if self._unavailable and (self._reattach is None or self._reattach.done()):
            self._reattach = self._reattach_pool.submit(self.retry_unavailable)
        if self.rlm is not None and self.replicated and (self._follow is None
                                                         or self._follow.done()):
            self._follow = self._reattach_pool.submit(self._follow_roles)
        if self.rlm is not None:
            self.update_copy_lag()
            self.rlm.submit_tiering(self.leading_logs())

    def submit_due_tails(self) -> None:
        """The scheduler's tail task: it only looks which tiered logs are due for tail
        publishing (``remote.log.tail.ms``; no request) and submits their publishes to the
        publisher's own threads."""
        if self.rlm is not None and self._copy_lag_max < LONG_MAX:
            self.update_copy_lag()  # no request: the limit follows the disk closely
        if self.rlm is not None and self.rlm.tail is not None:
            self.rlm.tail.submit_due(self.leading_logs())

    def publish_tail_now(self) -> dict[str, bool]:
        """Publish the tail of every tiered log whose topic has ``remote.log.tail.ms`` >= 0
        now, on the caller's thread; returns, by directory name, whether its tail manifest
        was replaced."""
        rlm = self.rlm
        if rlm is None or rlm.tail is None:
            return {}
        return {lg.directory.name: rlm.tail.publish(lg) for lg in self.leading_logs()
                if lg.config["remote.log.tail.ms"] >= 0}

    def await_tail_publishing(self, timeout_s: float | None = None) -> bool:
        """Wait until the tail publishes submitted so far have finished; False on timeout."""
        rlm = self.rlm
        return True if rlm is None or rlm.tail is None else rlm.tail.await_publishing(timeout_s)

    def delete_table(self, logs: Sequence[Log]) -> None:
        """Drop the table of the topic whose partitions are ``logs`` (being deleted), before
        its remote data goes; nothing when a partition's tier is unavailable (deleting it
        raises that next, and deleting again drops the table then)."""
        if self.rlm is None or any(lg.remote is None or isinstance(lg.remote, UnavailableRemote)
                                   for lg in logs) or not all(map(self._writes, logs)):
            return
        self.rlm.drop_table(logs)

    def delete_partition(self, partition_log: Log) -> None:
        """Delete the partition's remote data, if it has any (on a replicating node only
        while it writes the partition's tier: its leader deletes it, its followers leave it)."""
        if partition_log.remote is not None and self.rlm is not None \
                and self._writes(partition_log):
            self.rlm.delete_partition(partition_log)

    def _writes(self, partition_log: Log) -> bool:
        """Whether this node writes the partition's tier (see :meth:`leading_logs`), or led
        it last and may claim it again (no newer leader owns the tier)."""
        rlm = self.rlm
        if rlm is None or not self.replicated:
            return True
        tp = (partition_log.topic, partition_log.partition)
        with self._roles_lock:
            role, last = self._roles.get(tp), self._last_led.get(tp)
        if role is not None and rlm.leads(partition_log):
            return True
        if role is None and last is not None and self._claim(tp, partition_log, rlm, *last):
            return True
        log.info("%s: its remote data is left to the partition's leader",
                 partition_log.directory.name)
        return False

    def close(self) -> None:
        """Stop the retries, then the remote work (waiting a bounded time for a hung upload)."""
        self._reattach_pool.shutdown(wait=False, cancel_futures=True)
        if self.rlm is not None:
            self.rlm.close()
