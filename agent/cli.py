"""Entry point of ``orch-agent``.

``orch-agent [flags]`` parses the flags, loads the ``--config`` file, validates
the whole effective configuration (every problem reported at once), sets up
logging and runs the agent process (:mod:`agent.process`) until SIGTERM.

Exit codes: 0 after an orderly stop, 1 when the agent fails to start or a part
of it fails, 2 for a bad flag, config file or configuration (restarting cannot
fix those; the systemd unit does not restart on 2).
"""

from __future__ import annotations

import os
import platform
import sys

from apiserver_min.api import names
from apiserver_min.version import __version__

from . import logging as agent_logging
from .config import ConfigError, build_config
from .options import FlagError, format_help, parse_args
from .process import StartError, run_agent
from .validation import validate

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def _err(message: str) -> None:
    print(f"{names.AGENT_NAME}: error: {message}", file=sys.stderr)


def _version_text(kind: str) -> str:
    if kind == "raw":
        return (
            f"version.Info{{Component:{names.AGENT_NAME!r}, Version:'v{__version__}', "
            f"Python:{platform.python_version()!r}, Implementation:"
            f"{platform.python_implementation()!r}, Platform:'{sys.platform}/{platform.machine()}'}}"
        )
    return f"{names.AGENT_NAME} v{__version__}"


def join_main(argv: list[str]) -> int:
    """``orch-agent join``: token discovery, the bootstrap config, then the agent (agent.join)."""
    # Discovery checks the CA pin with the cryptography library: loaded only for a join.
    from .join import main as join

    return join(argv, run_agent=main)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "join":
        return join_main(argv[1:])

    try:
        parsed = parse_args(argv)
    except FlagError as exc:
        _err(str(exc))
        print(f"Run '{names.AGENT_NAME} --help' for the flags.", file=sys.stderr)
        return EXIT_USAGE
    if parsed.show_help:
        sys.stdout.write(format_help())
        return EXIT_OK
    if parsed.show_version:
        print(_version_text(parsed.show_version))
        return EXIT_OK

    try:
        cfg = build_config(parsed)
    except ConfigError as exc:
        _err("invalid configuration file" if cfg_file(parsed) else "invalid flags")
        for line in exc.errors:
            print(f"  {line}", file=sys.stderr)
        return EXIT_USAGE
    errors = validate(cfg)
    if errors:
        _err(f"invalid configuration ({len(errors)} error{'s' if len(errors) > 1 else ''}):")
        for line in errors:
            print(f"  {line}", file=sys.stderr)
        return EXIT_USAGE

    agent_logging.configure(
        fmt=cfg.logging_format,
        verbosity=cfg.verbosity,
        vmodule=cfg.vmodule,
        split_stream=cfg.log_json_split_stream,
        info_buffer_size=cfg.log_json_info_buffer_size.value(),
    )
    log = agent_logging.get_logger("cli")
    for warning in cfg.warnings:
        log.warning(warning)
    log.info(
        f"Starting {names.AGENT_NAME}",
        version=f"v{__version__}",
        mode=str(cfg.mode),
        pid=os.getpid(),
        config=cfg.config_file or None,
        python=platform.python_version(),
    )

    if cfg.proxy_cleanup:
        # The service proxy's code is loaded by the nodes that run it (or clean it up).
        from .proxy.localnet import ROUTE_LOCALNET, SysctlError
        from .proxy.nft import NftError
        from .proxy.proxier import cleanup as proxy_cleanup

        try:
            existed, restored = proxy_cleanup(state_dir=cfg.root_dir)
        except (NftError, SysctlError) as exc:
            log.error("Removing the service proxy rules failed", err=exc)
            return EXIT_FAILED
        log.info(
            "Removed the service proxy rules" if existed else "No service proxy rules to remove",
            table=names.PROXY_NFT_TABLE,
        )
        if restored is not None:
            log.info(
                "Put back a sysctl the service proxy had set", sysctl=f"{ROUTE_LOCALNET.replace('/', '.')}={restored}"
            )
        agent_logging.flush()
        return EXIT_OK

    try:
        return run_agent(cfg, version=__version__)
    except StartError as exc:
        log.error("Failed to start the agent", err=exc)
        return EXIT_FAILED
    finally:
        agent_logging.flush()


def cfg_file(parsed) -> str:
    return parsed.values.get("config", "")


if __name__ == "__main__":
    sys.exit(main())
