"""Structured logging for the node agent: klog-style text or JSON, ``-v`` levels.

Messages are constant strings; the variable parts go in key=value fields::

    log = get_logger(__name__)
    log.info("Pod sources ready", sources=2)
    log.v(4).info("Sync loop iteration", took_ms=3)
    log.error("Failed to apply OOM score", err=exc, value=-999)

Text format (upstream's default)::

    I0523 14:03:02.123456   12345 process.py:120] "Sync loop iteration" took_ms=3

JSON format (``--logging-format=json``), one object per line::

    {"ts":1700000000.123456,"caller":"process.py:120","msg":"Sync loop iteration","v":4,"took_ms":3}

``-v N`` shows ``v(level)`` messages up to N; ``--vmodule pattern=N`` sets the
level per module (a glob over the module's file stem or logger name). Info and
warnings go to stderr, as do errors; with ``--log-json-split-stream`` info goes
to stdout (optionally buffered by ``--log-json-info-buffer-size``). Everything
is written at once; :func:`flush` is also called every ``--log-flush-frequency``
by the agent so a buffered stream is never older than that.

Records of other libraries using the standard ``logging`` module (asyncio)
pass through the same handler.
"""

from __future__ import annotations

import datetime as _dt
import fnmatch
import io
import json
import logging as _std
import os
import sys
import time
from typing import Any, Iterable, TextIO

from apiserver_min.api.duration import format_duration

__all__ = ["configure", "get_logger", "Logger", "flush", "last_flush", "reset", "set_verbosity", "verbosity"]

_ROOT = "orch"  # stdlib logger all agent loggers hang under


class _State:
    fmt = "text"
    verbosity = 0
    vmodule: tuple[tuple[str, int], ...] = ()
    handler: "_Handler | None" = None
    last_flush = 0.0
    cache: dict[str, int] = {}


_state = _State()


def _level_for(name: str, module: str) -> int:
    """Effective verbosity for a logger/module, honouring --vmodule."""
    if not _state.vmodule:
        return _state.verbosity
    key = f"{name}\0{module}"
    level = _state.cache.get(key)
    if level is None:
        level = _state.verbosity
        stem = module.rsplit(".", 1)[-1]
        for pattern, lvl in _state.vmodule:
            if fnmatch.fnmatchcase(stem, pattern) or fnmatch.fnmatchcase(name, pattern):
                level = lvl
                break
        _state.cache[key] = level
    return level


# --- value rendering -------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, BaseException):
        return str(value) or type(value).__name__
    if isinstance(value, _dt.timedelta):
        return format_duration(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "items"):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


def _text_value(value: Any) -> str:
    v = _jsonable(value)
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "<nil>"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


# --- formatting ------------------------------------------------------------------

_SEVERITY = {_std.DEBUG: "I", _std.INFO: "I", _std.WARNING: "W", _std.ERROR: "E", _std.CRITICAL: "F"}


def _format_text(record: _std.LogRecord) -> str:
    t = _dt.datetime.fromtimestamp(record.created)
    sev = _SEVERITY.get(record.levelno, "I")
    head = f"{sev}{t:%m%d %H:%M:%S}.{t.microsecond:06d} {record.process:7d} {record.filename}:{record.lineno}]"
    parts = [head, json.dumps(record.getMessage(), ensure_ascii=False)]
    kv = getattr(record, "orch_kv", None)
    if kv:
        parts += [f"{k}={_text_value(v)}" for k, v in kv.items()]
    if record.exc_info and record.exc_info[1] is not None and not (kv and "err" in kv):
        parts.append(f"err={_text_value(record.exc_info[1])}")
    return " ".join(parts)


def _format_json(record: _std.LogRecord) -> str:
    obj: dict[str, Any] = {
        "ts": round(record.created, 6),
        "caller": f"{record.filename}:{record.lineno}",
        "msg": record.getMessage(),
    }
    if record.levelno < _std.ERROR:
        obj["v"] = getattr(record, "orch_v", 0)
    kv = getattr(record, "orch_kv", None)
    if kv:
        for k, v in kv.items():
            obj[k] = _jsonable(v)
    if record.exc_info and record.exc_info[1] is not None and "err" not in obj:
        obj["err"] = _jsonable(record.exc_info[1])
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


class _Handler(_std.Handler):
    def __init__(self, fmt: str, info_stream: TextIO, error_stream: TextIO) -> None:
        super().__init__(_std.DEBUG)
        self.render = _format_json if fmt == "json" else _format_text
        self.info_stream = info_stream
        self.error_stream = error_stream

    def emit(self, record: _std.LogRecord) -> None:
        try:
            line = self.render(record) + "\n"
            stream = self.error_stream if record.levelno >= _std.ERROR else self.info_stream
            stream.write(line)
            if stream is self.error_stream or self.info_stream is self.error_stream:
                stream.flush()
        except Exception:  # never let logging take the agent down
            self.handleError(record)

    def flush(self) -> None:
        for s in {id(self.info_stream): self.info_stream, id(self.error_stream): self.error_stream}.values():
            try:
                s.flush()
            except (OSError, ValueError):
                pass


def configure(
    *,
    fmt: str = "text",
    verbosity: int = 0,
    vmodule: Iterable[tuple[str, int]] = (),
    split_stream: bool = False,
    info_buffer_size: int = 0,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> None:
    """Install the agent's handler (replacing any earlier one)."""
    reset()
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    info = err
    if fmt == "json" and split_stream:
        info = out
        if info_buffer_size > 0 and stdout is None:
            raw = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=info_buffer_size)
            info = io.TextIOWrapper(raw, encoding="utf-8", line_buffering=False, write_through=False)
    _state.fmt = fmt
    _state.verbosity = verbosity
    _state.vmodule = tuple(vmodule)
    _state.cache = {}
    handler = _Handler(fmt, info, err)
    _state.handler = handler
    root = _std.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(_std.INFO)
    _std.getLogger(_ROOT).setLevel(_std.DEBUG)
    _state.last_flush = time.monotonic()


def set_verbosity(level: int) -> None:
    """Change -v while running (the server's /debug/flags/v)."""
    _state.verbosity = level
    _state.cache = {}


def verbosity() -> int:
    return _state.verbosity


def reset() -> None:
    root = _std.getLogger()
    if _state.handler is not None:
        _state.handler.flush()
        if _state.handler in root.handlers:
            root.removeHandler(_state.handler)
    _state.handler = None


def flush() -> None:
    if _state.handler is not None:
        _state.handler.flush()
    _state.last_flush = time.monotonic()


def last_flush() -> float:
    """Monotonic time of the last :func:`flush` (the ``log`` health check reads it)."""
    return _state.last_flush


class _Verbose:
    __slots__ = ("_logger", "_level", "enabled")

    def __init__(self, logger: "Logger", level: int, enabled: bool) -> None:
        self._logger = logger
        self._level = level
        self.enabled = enabled

    def info(self, msg: str, **kv: Any) -> None:
        if self.enabled:
            self._logger._emit(_std.INFO, msg, kv, self._level)

    def __bool__(self) -> bool:
        return self.enabled


class Logger:
    """A named logger with klog's verbosity levels and structured fields."""

    __slots__ = ("name", "_std", "_module")

    def __init__(self, name: str) -> None:
        self.name = name
        self._module = name
        self._std = _std.getLogger(f"{_ROOT}.{name}")

    def v(self, level: int) -> _Verbose:
        return _Verbose(self, level, level <= _level_for(self.name, self._module))

    def info(self, msg: str, **kv: Any) -> None:
        self._emit(_std.INFO, msg, kv, 0)

    def warning(self, msg: str, **kv: Any) -> None:
        self._emit(_std.WARNING, msg, kv, 0)

    def error(self, msg: str, err: BaseException | str | None = None, **kv: Any) -> None:
        if err is not None:
            kv = {"err": err, **kv}
        self._emit(_std.ERROR, msg, kv, 0)

    def _emit(self, level: int, msg: str, kv: dict, v: int) -> None:
        # stacklevel 3: the caller of info()/error() (or of _Verbose.info()).
        self._std.log(level, "%s", msg, extra={"orch_kv": kv, "orch_v": v}, stacklevel=3)


def get_logger(name: str) -> Logger:
    return Logger(name)
