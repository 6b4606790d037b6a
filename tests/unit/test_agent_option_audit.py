"""Every node-agent option acts, or is refused at start: never accepted and ignored.

The audit: an option's configuration attribute must be read by agent code outside
the option table, the config decoder, validation and the refusal table; or be
refused (agent/unsupported.py) at values the node cannot honour; or be listed
below with the reason its effect is indirect or is another piece of work's.
"""

from __future__ import annotations

import datetime
import functools
import pathlib
import re

import pytest

from agent import unsupported
from agent.config import from_argv
from agent.options import OPTIONS
from agent.validation import validate

AGENT = pathlib.Path(__file__).resolve().parents[2] / "agent"
NOT_CONSUMERS = {"options", "validation.py", "config.py", "unsupported.py"}

# Options whose value is used without their attribute name appearing in agent code (an option whose
# work is another piece's may wait here with its owner named, until that work reads it).
INDIRECT = {
    "deprecation_warnings": "read by the option parser itself (agent/options/parser.py) to silence warnings",
    "container_runtime": "its only valid value, remote, is enforced by the table's choices",
}


# cfg.attr, getattr(cfg, "attr", ...) and source("attr") spellings.
_READ = re.compile(r"(?:\.|[\"'])([A-Za-z_][A-Za-z0-9_]*)\b")


@functools.cache
def _agent_sources() -> dict[str, frozenset[str]]:
    """Per agent module (outside the option machinery): the names it reads as attributes or strings."""
    out = {}
    for path in AGENT.rglob("*.py"):
        rel = path.relative_to(AGENT)
        if rel.parts[0] in NOT_CONSUMERS:
            continue
        out[str(rel)] = frozenset(_READ.findall(path.read_text(encoding="utf-8")))
    return out


def _consumers(attr: str, sources: dict[str, frozenset[str]]) -> list[str]:
    return sorted(name for name, read in sources.items() if attr in read)


def test_every_option_acts_or_is_refused_or_is_listed():
    sources = _agent_sources()
    refused = {r.attr for r in unsupported.REFUSALS}
    ignored = [
        o.flag or o.field
        for o in OPTIONS
        if o.attr not in refused and o.attr not in INDIRECT and not _consumers(o.attr, sources)
    ]
    assert not ignored, (
        f"options accepted but read nowhere in the agent: {ignored}; make them act, refuse them in "
        "agent/unsupported.py, or list them in INDIRECT with the reason"
    )


def test_the_lists_are_not_stale():
    attrs = {o.attr for o in OPTIONS}
    sources = _agent_sources()
    assert set(INDIRECT) <= attrs
    assert {r.attr for r in unsupported.REFUSALS} <= attrs
    # An entry goes once agent code reads the option (owned-elsewhere ones when their owner lands).
    now_read = [a for a in INDIRECT if _consumers(a, sources)]
    assert not now_read, f"remove from INDIRECT, the agent reads them now: {now_read}"


def test_refused_options_accept_their_defaults():
    assert not [p for p in validate(from_argv([])) if "not supported on this node" in p]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--hairpin-mode=hairpin-veth"], "--hairpin-mode=hairpin-veth is not supported on this node: "),
        (["--iptables-drop-bit=3"], "--iptables-drop-bit=3 is not supported on this node: "),
        (["--make-iptables-util-chains=false"], "--make-iptables-util-chains=false is not supported on this node"),
        (["--cloud-provider=external"], "--cloud-provider=external is not supported on this node: "),
        (["--streaming-connection-idle-timeout=5m"], "--streaming-connection-idle-timeout=5m0s is not supported"),
        (["--experimental-mounter-path=/bin/mount"], "--experimental-mounter-path=/bin/mount is not supported"),
        (["--runtime-cgroups=/rt"], "--runtime-cgroups=/rt is not supported on this node: "),
        (["--system-cgroups=/sys"], "--system-cgroups=/sys is not supported on this node: "),
        (["--contention-profiling"], "--contention-profiling=true is not supported on this node: "),
    ],
)
def test_a_value_the_node_cannot_honour_is_refused(argv, message):
    problems = validate(from_argv(argv))
    assert any(p.startswith(message) for p in problems), problems


def test_config_only_fields_are_refused_by_field_name(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(
        "kind: AgentConfiguration\napiVersion: agent.config.orch.io/v1beta1\nenableProfilingHandler: true\n"
    )
    problems = validate(from_argv([f"--config={config}"]))
    assert any(p.startswith("enableProfilingHandler=true is not supported on this node") for p in problems)


def test_refusal_shows_durations_as_flags_take_them():
    assert unsupported._shown(datetime.timedelta(minutes=5)) == "5m0s"
