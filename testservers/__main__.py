"""Command line: `python -m testservers --transport {http,stdio} [options]`."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from testservers.app import ServerOptions, load_or_generate, run_http, run_stdio
from testservers.server import ERAS


def _header(value: str) -> tuple[str, str]:
    name, sep, header_value = value.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError("expected NAME=VALUE")
    return name, header_value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the test server's command line."""
    parser = argparse.ArgumentParser(prog="python -m testservers", description=__doc__)
    parser.add_argument("--transport", choices=["http", "stdio"], default="http")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tools", type=int, default=10)
    parser.add_argument("--prompts", type=int, default=0)
    parser.add_argument("--resources", type=int, default=0)
    parser.add_argument("--page-size", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--era", choices=ERAS, default="both")
    parser.add_argument("--state-file", type=Path)
    parser.add_argument("--require-bearer", metavar="TOKEN")
    parser.add_argument("--require-header", type=_header, metavar="NAME=VALUE")
    parser.add_argument("--mutate-every", type=float, metavar="SECONDS")
    parser.add_argument("--notify-on-mutate", action="store_true")
    parser.add_argument(
        "--no-list-changed",
        action="store_true",
        help="advertise listChanged: false and serve no subscriptions/listen",
    )
    parser.add_argument("--ready-file", type=Path)
    parser.add_argument("--log-level", default="WARNING")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Run a test server process."""
    args = parse_args(argv)
    # stdout carries the protocol on stdio, so logs always go to stderr.
    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper())
    options = ServerOptions(
        page_size=args.page_size,
        era=args.era,
        notify_capable=not args.no_list_changed,
        require_bearer=args.require_bearer,
        require_header=args.require_header,
        state_file=args.state_file,
        mutate_every=args.mutate_every,
        notify_on_mutate=args.notify_on_mutate,
    )
    catalog = load_or_generate(
        args.state_file,
        tools=args.tools,
        prompts=args.prompts,
        resources=args.resources,
        seed=args.seed,
    )
    if args.transport == "stdio":
        run_stdio(catalog, options)
    else:
        run_http(catalog, options, port=args.port, ready_file=args.ready_file)


if __name__ == "__main__":
    main()
