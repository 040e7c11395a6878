"""Command line of the conformance checks: ``python -m attnsurvey.conformance TARGET... [--json]``."""

from __future__ import annotations

import argparse
import json
import sys

from . import TARGETS, TOLERANCE, report, run


def main(argv: list[str] | None = None) -> int:
    """Run the checks of the named targets and print the report (or JSON).

    Args:
        argv: the arguments (default ``sys.argv[1:]``): target names (default all of
            ``torch transformers x_transformers entmax``), ``--json`` for a JSON array
            of results, ``--tolerance`` for the agreement tolerance.

    Returns:
        The exit status: 0 when every difference is explained by a mapped convention,
        1 when some difference is unexplained.

    Raises:
        SystemExit: for an unknown target (argparse's usage error, status 2).
    """
    parser = argparse.ArgumentParser(prog="python -m attnsurvey.conformance", description=__doc__)
    parser.add_argument("targets", nargs="*", metavar="TARGET", help="any of " + ", ".join(TARGETS) + " (default all)")
    parser.add_argument("--json", action="store_true", help="print the results as a JSON array")
    parser.add_argument("--tolerance", type=float, default=TOLERANCE, help=f"agreement tolerance (default {TOLERANCE})")
    args = parser.parse_args(argv)
    unknown = [t for t in args.targets if t not in TARGETS]
    if unknown:
        parser.error(f"unknown target(s) {', '.join(unknown)}; choose from {', '.join(TARGETS)}")
    results = run(args.targets or list(TARGETS), tolerance=args.tolerance)
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=1))
    else:
        print(report(results))
    return 0 if all(r.explained for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
