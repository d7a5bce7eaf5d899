"""``tierlog.spark.session()``: a local SparkSession set up for the ``tierlog`` source, so a
notebook or script needs one call instead of the settings a Python data source depends on.
"""

from __future__ import annotations

import os
import sys
from typing import Any

#: Settings a local session gets unless the caller passes its own: Python data source filter
#: pushdown (off in Spark by default; ``filterPushdown=true`` needs it), Python errors without
#: their traceback (Spark shows a data source's error after "Failed to ...: "; with the
#: traceback that first line says only "Traceback (most recent call last):"), UTC session
#: time, no UI or progress bars, few shuffle partitions for a machine's cores.
LOCAL_DEFAULTS: dict[str, str] = {
    "spark.sql.python.filterPushdown.enabled": "true",
    "spark.sql.execution.pyspark.udf.hideTraceback.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}


def session(app_name: str = "tierlog", master: str = "local[*]", **conf: Any) -> Any:
    """A SparkSession (``getOrCreate``) on ``master`` with ``tierlog`` registered.

    Spark's Python workers run ``sys.executable`` (PYSPARK_PYTHON and PYSPARK_DRIVER_PYTHON
    are set when unset), the interpreter that imported tierlog, so they can import it too.
    ``conf`` are Spark settings (``spark.driver.memory="4g"``), over ``LOCAL_DEFAULTS``.
    On a cluster, build the session yourself and call ``register`` (see the README).
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
