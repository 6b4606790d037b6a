"""The command-line parser of ``orch-agent`` (Go pflag syntax), over the flag table."""

from __future__ import annotations

import dataclasses
import types
from typing import Any, Mapping, Sequence

from apiserver_min.api import names

from .flagtypes import FlagError
from .table import BY_FLAG, BY_SHORTHAND, Option

# --- parsing ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ParsedArgs:
    """What the command line said: values of the flags given, in the order first given."""

    values: Mapping[str, Any]  # attr -> typed value, explicit flags only
    explicit: tuple[str, ...]  # flag names as given, first use order
    deprecation_warnings: tuple[str, ...]
    show_help: bool = False
    show_version: str | None = None  # None, "true" or "raw"

    def given(self, flag: str) -> bool:
        return flag in self.explicit


def _invalid(opt: Option, text: str, reason: str) -> FlagError:
    return FlagError(f'invalid value "{text}" for flag {opt.dashed}: {reason}')


def _unknown(name: str, shorthand: bool = False) -> FlagError:
    if shorthand:
        return FlagError(f"unknown shorthand flag: {name!r} in -{name}")
    import difflib  # only for a mistyped flag

    close = difflib.get_close_matches(name, list(BY_FLAG), n=1, cutoff=0.75)
    hint = f" (did you mean --{close[0]}?)" if close else ""
    return FlagError(f"unknown flag: --{name}{hint}")


def parse_args(argv: Sequence[str]) -> ParsedArgs:
    """Parse ``argv`` (without the program name); raise :class:`FlagError` on a bad flag."""
    values: dict[str, Any] = {}
    explicit: list[str] = []
    positional: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            positional.extend(args[i:])
            break
        if arg.startswith("--"):
            name, eq, text = arg[2:].partition("=")
            opt = BY_FLAG.get(name)
            if opt is None:
                raise _unknown(name)
            has_value = bool(eq)
        elif arg.startswith("-") and len(arg) > 1:
            short = arg[1]
            opt = BY_SHORTHAND.get(short)
            if opt is None:
                raise _unknown(arg[1:], shorthand=True)
            rest = arg[2:]
            has_value = bool(rest)
            text = rest[1:] if rest.startswith("=") else rest
        else:
            positional.append(arg)
            continue
        if not has_value:
            if opt.type.no_value is not None:
                text = opt.type.no_value
            elif i < len(args):
                text = args[i]
                i += 1
            else:
                raise FlagError(f"flag needs an argument: {opt.dashed}")
        try:
            value = opt.type.parse(text)
        except ValueError as exc:
            raise _invalid(opt, text, str(exc)) from None
        if opt.attr in values and opt.type.repeatable:
            values[opt.attr] = opt.type.combine(values[opt.attr], value)
        else:
            values[opt.attr] = value
        if opt.flag not in explicit:
            explicit.append(opt.flag)
    if positional:
        raise FlagError(f"{names.AGENT_NAME} takes no arguments, got {' '.join(positional)!r} (sub-command: join)")
    warn = values.get("deprecation_warnings", True)
    warnings = []
    if warn:
        for flag in explicit:
            msg = BY_FLAG[flag].deprecation_message()
            if msg:
                warnings.append(f"Flag --{flag} has been deprecated, {msg}")
    return ParsedArgs(
        values=types.MappingProxyType(values),
        explicit=tuple(explicit),
        deprecation_warnings=tuple(warnings),
        show_help=bool(values.get("help", False)),
        show_version=values.get("version"),
    )
