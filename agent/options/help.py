"""``orch-agent --help``: the flag table as text, by group."""

from __future__ import annotations

import textwrap

from apiserver_min.api import names

from .flagtypes import HELP, VERSION, BoolType, StringType
from .table import GROUPS, OPTIONS, Option

# --- help -------------------------------------------------------------------------


def _show_default(opt: Option) -> str:
    if opt.default_text is not None:
        return opt.default_text
    if opt.type is HELP or opt.type is VERSION:
        return ""
    if isinstance(opt.type, BoolType):
        return "true" if opt.default else ""  # pflag omits false defaults
    text = opt.type.show(opt.default)
    if isinstance(opt.type, StringType) and text:
        return f'"{text}"'
    return text


def format_help(width: int = 100) -> str:
    lines = [
        f"usage: {names.AGENT_NAME} [flags]",
        f"       {names.AGENT_NAME} join ...",
        "",
        "The orch node agent: runs pods from static manifests, a manifest URL or the API server",
        "on a CRI runtime (containerd). With --orchconfig it works with the API server (API-server",
        "mode); without it, it runs local pods only (standalone mode).",
        "",
        "Most flags mirror a field of the --config file (an AgentConfiguration,",
        f"{names.AGENT_CONFIG_API_VERSION}) and are deprecated in favour of it; flags given on the",
        "command line override the file.",
    ]
    for group in GROUPS:
        opts = [o for o in OPTIONS if o.group == group and o.flag]
        if not opts:
            continue
        lines += ["", f"{group}:"]
        for o in opts:
            head = f"  -{o.shorthand}, --{o.flag}" if o.shorthand else f"      --{o.flag}"
            if o.type is not HELP and o.type is not VERSION and not isinstance(o.type, BoolType):
                head += f" {o.type.name}"
            elif o.type is VERSION:
                head += " version[=true]"
            body = o.help
            default = _show_default(o)
            if default:
                body += f" (default {default})"
            msg = o.deprecation_message()
            if msg:
                body += f" (DEPRECATED: {msg})"
            paragraphs = body.split("\n")
            wrapped = []
            for para in paragraphs:
                wrapped += textwrap.wrap(para, width=width - 10) or [""]
            lines.append(head)
            lines += [" " * 10 + w for w in wrapped]
    return "\n".join(lines) + "\n"
