"""Entry point of ``orch-agent``.

The node agent's full flag set, configuration file and run loop arrive with the
agent issues; until then the binary answers ``--version`` and ``--help`` and
says plainly that running is not implemented yet.
"""

from __future__ import annotations

import argparse
import sys

from apiserver_min.api import names
from apiserver_min.version import __version__


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=names.AGENT_NAME,
        description="The orch node agent: runs pods from manifests, a URL or the API server on "
                    "containerd over CRI.",
    )
    p.add_argument("--version", action="version", version=f"{names.AGENT_NAME} v{__version__}")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    build_parser().parse_known_args(argv)
    print(f"{names.AGENT_NAME}: running the agent is not yet implemented in v{__version__}",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
