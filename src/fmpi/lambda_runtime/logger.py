"""The handler's log: aws-lambda-powertools' JSON lines (job, rank, request id on every line), or the same by hand."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

_logger: Any = None


def get_logger() -> Any:
    global _logger
    if _logger is None:
        try:
            from aws_lambda_powertools import Logger

            _logger = Logger(service="fmpi-rank", stream=sys.stdout)
        except ImportError:  # not bundled: plain JSON lines with the same keys
            _logger = _FallbackLogger()
    return _logger


class _FallbackLogger:
    def __init__(self) -> None:
        self._keys: dict[str, Any] = {}
        self._log = logging.getLogger("fmpi-rank")

    def append_keys(self, **keys: Any) -> None:
        self._keys.update(keys)

    def remove_keys(self, names: list[str]) -> None:
        for name in names:
            self._keys.pop(name, None)

    def _emit(self, level: str, message: str, extra: dict | None = None) -> None:
        print(json.dumps({"level": level, "message": message, "service": "fmpi-rank", **self._keys, **(extra or {})}), file=sys.stdout)

    def info(self, message: str, extra: dict | None = None) -> None:
        self._emit("INFO", message, extra)

    def warning(self, message: str, extra: dict | None = None) -> None:
        self._emit("WARNING", message, extra)

    def error(self, message: str, extra: dict | None = None) -> None:
        self._emit("ERROR", message, extra)
