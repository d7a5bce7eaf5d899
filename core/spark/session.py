"""Setting up a SparkSession for the ``tierlog`` source: ``tierlog.spark.session()`` (a local
session, so a notebook or script needs one call instead of the settings a Python data source
depends on), and what ``register`` does to a session the user made: errors shown first, and
a check that the workers' Python can import tierlog.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING

from tierlog.errors import SparkWorkerError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: Spark shows a Python data source's error after "Failed to ...: "; with the traceback,
#: that first line says only "Traceback (most recent call last):" and the error is last.
#: A SQL setting, so ``register`` can set it on a running session (PySpark 4.3.0).
HIDE_TRACEBACK = "spark.sql.execution.pyspark.udf.hideTraceback.enabled"

#: Settings a local session gets unless the caller passes its own: Python data source filter
#: pushdown (off in Spark by default; ``filterPushdown=true`` needs it), Python errors without
#: their traceback (``HIDE_TRACEBACK``), UTC session time, no UI or progress bars, few
#: shuffle partitions for a machine's cores.
LOCAL_DEFAULTS: dict[str, str] = {
    "spark.sql.python.filterPushdown.enabled": "true",
    HIDE_TRACEBACK: "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}


def session(app_name: str = "tierlog", master: str = "local[*]", **conf: object
            ) -> SparkSession:
    """A SparkSession (``getOrCreate``) on ``master`` with ``tierlog`` registered.

    Spark's Python workers run ``sys.executable`` (PYSPARK_PYTHON and PYSPARK_DRIVER_PYTHON
    are set when unset), the interpreter that imported tierlog, so they can import it too.
    ``conf`` are Spark settings (``spark.driver.memory="4g"``), over ``LOCAL_DEFAULTS``.
    On a cluster, build the session yourself and call ``register`` (docs/spark-safety.md).
    """
    from pyspark.sql import SparkSession

    from tierlog.spark.source import register

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**LOCAL_DEFAULTS, **conf}.items():
        builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    register(spark)
    return spark


def show_errors_first(spark: SparkSession) -> None:
    """Set ``HIDE_TRACEBACK`` on ``spark`` unless its user set it (either way): the first
    line of a failed query is then the error (``tierlog.errors.ConfigError: path: ...``),
    not "Traceback (most recent call last):". It applies to the session's Python UDFs too."""
    if spark.conf.get(HIDE_TRACEBACK, None) is None:
        spark.conf.set(HIDE_TRACEBACK, "true")
        log.info("set %s=true so that a tierlog error is the first line Spark shows",
                 HIDE_TRACEBACK)


def check_workers(spark: SparkSession) -> str:
    """Run a one-task job whose Python imports tierlog; return the interpreter the workers
    run. SparkWorkerError, saying how to fix it, when they cannot import tierlog (or cannot
    start). Spark Connect sessions (no SparkContext) are not checked."""
    from pyspark.errors import PySparkException

    try:
        context = spark.sparkContext
    except PySparkException:  # Spark Connect: no SparkContext; a read reports the failure
        log.info("not checking the Python of Spark's workers: the session has no SparkContext")
        return ""
    driver_python = getattr(context, "pythonExec", None) or "python3"

    def probe(_: object) -> tuple[str, str | None]:  # pickled by value: needs no tierlog
        import sys

        try:
            import tierlog  # noqa: F401 - the probe: can the worker import it
        except ImportError as e:
            return sys.executable, f"{type(e).__name__}: {e}"
        return sys.executable, None

    how = (f"set PYSPARK_PYTHON (or spark.pyspark.python) to a Python that has tierlog "
           f"installed (this driver runs {sys.executable}), or install tierlog (pip install "
           f"'tierlog[spark]') into the Python the workers run")
    try:
        [(executable, error)] = context.parallelize([0], 1).map(probe).collect()
    except Exception as e:  # the worker did not start, or could not run the probe
        first = next((line for line in str(e).splitlines() if line.strip()), repr(e))
        raise SparkWorkerError(f"Spark's Python workers ({driver_python}) cannot run the "
                               f"tierlog data source: {first[:300]}; {how}") from e
    if error is not None:
        raise SparkWorkerError(f"Spark's Python workers ({executable}) cannot import tierlog "
                               f"({error}), so spark.read.format('tierlog') would fail on "
                               f"them; {how}")
    return str(executable)
