"""What the benchmark scripts share: where they write their results."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_out_option(parser: argparse.ArgumentParser, default: Path) -> None:
    """``--out DIR``: the folder a benchmark writes its results to (default: its own folder
    under ``benchmarks/results``), so it can be re-run without touching the checkout."""
    parser.add_argument(
        "--out",
        type=Path,
        default=default,
        metavar="DIR",
        help="directory to write results to (default: %(default)s)",
    )
