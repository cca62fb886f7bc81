"""Run every benchmark module and write bench/results.md.

Usage: python -m bench [name ...]   (names like `engine`, `api`; default: all)
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results.md"


@dataclass
class BenchContext:
    """Shared facts for benchmark modules."""

    root: Path
    quick: bool


def _setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    os.environ.setdefault("SECRET_KEY", "bench-secret")
    os.environ.setdefault(
        "TOOLSYNC_ENCRYPTION_KEY", "uE7o9lqjR0h1a1Y1bVb1Yq7wqgYx8m6b2Y0z8s3Yw1E="
    )
    os.environ.setdefault("TOOLSYNC_ALLOW_PASSWORDLESS_DB", "1")
    os.environ.setdefault("TOOLSYNC_VAR_DIR", str(ROOT / "var" / "bench"))
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("names", nargs="*")
    parser.add_argument(
        "--quick", action="store_true", help="smaller sizes (smoke run)"
    )
    args = parser.parse_args()
    _setup_django()
    modules = sorted(p.stem for p in (ROOT / "bench").glob("bench_*.py"))
    if args.names:
        modules = [m for m in modules if m.removeprefix("bench_") in args.names]
    ctx = BenchContext(root=ROOT, quick=args.quick)
    sections: list[str] = []
    for name in modules:
        started = time.monotonic()
        print(f"== {name}", flush=True)
        module = importlib.import_module(f"bench.{name}")
        section = module.run(ctx)
        print(section, flush=True)
        sections.append(
            section.rstrip()
            + f"\n\n_{name} took {time.monotonic() - started:.0f} s._\n"
        )
    header = (
        "# Benchmark results\n\n"
        f"Written by `make bench` on {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, {platform.machine()}."
        f"{' Quick (smoke) sizes.' if args.quick else ''}\n\n"
    )
    if args.names and RESULTS.exists():
        # Partial run: replace only the sections that ran.
        print("partial run: writing bench/results.partial.md", flush=True)
        (ROOT / "bench" / "results.partial.md").write_text(header + "\n".join(sections))
        return
    RESULTS.write_text(header + "\n".join(sections))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
