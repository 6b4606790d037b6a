"""Entry point of ``orch-apiserver``."""

from __future__ import annotations

import logging
import sys

from .api import names
from .options import OptionsError, parse
from .server.app import run
from .tokencli import main as token_main


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "token":
        return token_main(argv[1:])
    try:
        opts = parse(argv)
    except OptionsError as exc:
        print(f"{names.APISERVER_NAME}: error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.DEBUG if opts.verbosity >= 4 else logging.INFO,
        format="%(asctime)s %(levelname).1s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for w in opts.warnings:
        logging.getLogger(names.APISERVER_NAME).warning("%s", w)

    return run(opts)


if __name__ == "__main__":
    sys.exit(main())
