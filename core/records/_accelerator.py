"""Finds tierlog's optional C accelerators, or says to use their pure-Python twins.

``TIERLOG_PURE_PYTHON=1`` asks for pure Python everywhere; a missing or broken extension
(no compiler at install time) falls back the same way, with a debug log line.
"""

from __future__ import annotations

import importlib
import logging
import os
from typing import Any

log = logging.getLogger(__name__)

#: Environment variable that, set to ``1``, disables every C accelerator.
PURE_PYTHON_ENV = "TIERLOG_PURE_PYTHON"


def accelerated(module: str, *names: str) -> tuple[Any, ...] | None:
    """The functions ``names`` of the C extension ``module``, or None when pure Python is
    asked for or the extension cannot be imported."""
    if os.environ.get(PURE_PYTHON_ENV) == "1":
        return None
    try:
        extension = importlib.import_module(module)
    except ImportError as exc:
        log.debug("tierlog C accelerator %s unavailable (%s); using pure Python", module, exc)
        return None
    return tuple(getattr(extension, name) for name in names)
