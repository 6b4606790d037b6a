"""Entry point of ``orch-apiserver``."""

from __future__ import annotations

import asyncio
import logging
import sys

from .api import names
from .options import OptionsError, parse
from .server.app import load_backend, run
from .server.workers import supervise, worker_role
from .storage.encryption import rewrite_all
from .tokencli import main as token_main


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "token":
        return token_main(argv[1:])
    if argv[:2] == ["encryption", "rewrite"]:
        return encryption_rewrite(argv[2:])
    try:
        opts = parse(argv)
    except OptionsError as exc:
        print(f"{names.APISERVER_NAME}: error: {exc}", file=sys.stderr)
        return 2
    worker = worker_role()
    logging.basicConfig(
        level=logging.DEBUG if opts.verbosity >= 4 else logging.INFO,
        # The workers of a --workers supervisor share its stderr: each line names its worker.
        format="%(asctime)s %(levelname).1s " + ("" if worker is None else f"w{worker[0]} ") + "%(name)s: %(message)s",
        stream=sys.stderr,
    )
    for w in opts.warnings:
        logging.getLogger(names.APISERVER_NAME).warning("%s", w)

    if worker is None and opts.workers > 1:
        return supervise(argv, opts.workers, opts.secure_port)
    return run(opts, worker)


def encryption_rewrite(argv: list[str]) -> int:
    """``orch-apiserver encryption rewrite [server flags]``: re-encrypt stored objects.

    Takes the server's own storage flags (``--data-dir``, ``--storage-backend``,
    ``--etcd-servers``, ``--etcd-prefix``) and ``--encryption-provider-config``; every
    object of a configured resource not yet in the first provider's first key is
    written again with it. The rotation: add the new key first in the file, restart
    every server, run this, then drop the old key. Exit 0 done, 1 some objects could
    not be decrypted (listed), 2 bad flags."""
    try:
        opts = parse(argv)
    except OptionsError as exc:
        print(f"{names.APISERVER_NAME} encryption rewrite: error: {exc}", file=sys.stderr)
        return 2
    if opts.encryption is None:
        print(
            f"{names.APISERVER_NAME} encryption rewrite: error: --encryption-provider-config is required",
            file=sys.stderr,
        )
        return 2
    transformers = opts.encryption

    async def go() -> int:
        backend = load_backend(opts)
        await backend.start()
        try:
            report = await rewrite_all(backend, transformers)
        finally:
            await backend.close()
        for reason in report.failed:
            print(f"error: {reason}", file=sys.stderr)
        print(f"rewrote {report.rewritten} objects; {report.current} already current; {len(report.failed)} failed")
        return 1 if report.failed else 0

    return asyncio.run(go())


if __name__ == "__main__":
    sys.exit(main())
