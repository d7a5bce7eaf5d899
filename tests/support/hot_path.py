"""Picks which twin of the producer's hot path the logs of a test use: the C accelerators or
their pure-Python twins, whatever TIERLOG_PURE_PYTHON chose for the process."""

from __future__ import annotations

import importlib

import pytest

from tierlog.log import segment_appender
from tierlog.records import file_records, plain_batch_write

TWINS = ["c", "python"]


def use_hot_path(monkeypatch: pytest.MonkeyPatch, twin: str) -> None:
    """Make segments armed from now on append plain batches with the C appender (which writes
    through the C batch writer) or with the Python appender and the Python batch writer. A
    missing accelerator fails the C case instead of quietly testing Python twice."""
    if twin == "c":
        appender = importlib.import_module("tierlog.log._segment_appender").PlainAppender
        writer = importlib.import_module("tierlog.records._plain_batch_write").write_plain_batch
    elif twin == "python":
        appender, writer = segment_appender.PlainAppenderPy, plain_batch_write.write_plain_batch_py
    else:
        raise ValueError(f"unknown hot path twin {twin!r}")
    monkeypatch.setattr(segment_appender, "PlainAppender", appender)
    monkeypatch.setattr(file_records, "write_plain_batch", writer)
