"""The ``rljax`` command: ``list``, ``run``, ``bench``, ``compare``.

Studies and benchmarks are found through entry-point groups (``rljax.experiments`` and
``rljax.benchmarks`` in pyproject.toml), so the library never imports ``experiments/``
and a user's own package can add studies of its own. Bad input prints one line
``error: <field>: <what is allowed>, got <value>`` on stderr and exits with status 2; no
traceback, no output directory.
"""

from __future__ import annotations

import argparse
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

EXIT_USAGE = 2
EXPERIMENT_GROUP = "rljax.experiments"
BENCHMARK_GROUP = "rljax.benchmarks"


class UsageError(Exception):
    """Bad command-line input; the message is printed as one line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, no usage dump
        raise UsageError(message)


def registry(group: str) -> dict[str, Any]:
    """``{name: entry point}`` of an entry-point group, sorted by name."""
    return {ep.name: ep for ep in sorted(entry_points(group=group), key=lambda e: e.name)}


def _load(group: str, name: str, what: str) -> Any:
    known = registry(group)
    if name not in known:
        names = ", ".join(known) or "(none installed)"
        raise UsageError(f"unknown {what} {name!r}; known {what}s: {names}")
    return known[name].load()


def cmd_list(args: argparse.Namespace) -> int:
    for name, ep in registry(EXPERIMENT_GROUP).items():
        try:
            description = getattr(ep.load(), "DESCRIPTION", "")
        except ImportError as err:  # a broken third-party study must not hide the others
            description = f"(cannot be imported: {err})"
        print(f"{name:<20} {description}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from rljax import io
    from rljax.config import build_config, parse_overrides, parse_value

    module = _load(EXPERIMENT_GROUP, args.name, "experiment")
    overrides = parse_overrides(module.Config, args.set or [])
    for flag, field in (("seeds", "seeds"), ("block_size", "block_size"),
                        ("base_seed", "base_seed")):
        value = getattr(args, flag)
        if value is not None:
            overrides[field] = parse_value(field, value, int)
    config = build_config(module.Config, overrides)
    out = Path(args.out) if args.out else Path("results") / args.name
    io.check_output_dir(out, args.overwrite)

    start = time.perf_counter()
    summary = module.run(config, out)
    io.write_json(out / "config.json", {
        "experiment": args.name,
        "config": asdict(config),
        "metadata": io.run_metadata(),
        "wall_seconds": time.perf_counter() - start,
    })
    print(f"wrote {out}/ (config.json, results.parquet, summary.json, report.md, *.png)")
    for key, value in summary.items():
        if isinstance(value, int | float | str) or value is None:
            print(f"  {key}: {value}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from rljax import io

    module = _load(BENCHMARK_GROUP, args.name, "benchmark")
    result = module.run()
    print(module.table(result))
    if args.json:
        io.write_json(args.json, result)
        print(f"wrote {args.json}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rljax", description="rljax: seed sweeps, studies and benchmarks")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    sub.add_parser("list", help="list the studies").set_defaults(func=cmd_list)

    run = sub.add_parser("run", help="run a study over many seeds")
    run.add_argument("name")
    run.add_argument("--seeds", help="number of seeds (>= 1)")
    run.add_argument("--block-size", dest="block_size",
                     help="seeds per device per compiled block (>= 1); fixes the result bits")
    run.add_argument("--base-seed", dest="base_seed", help="base seed (>= 0)")
    run.add_argument("--out", help="output directory (default results/NAME)")
    run.add_argument("--set", action="append", metavar="KEY=VALUE",
                     help="override a config field (repeatable)")
    run.add_argument("--overwrite", action="store_true",
                     help="replace the results in a non-empty output directory")
    run.set_defaults(func=cmd_run)

    bench = sub.add_parser("bench", help="run a benchmark and print its table")
    bench.add_argument("name")
    bench.add_argument("--json", help="also write the figures to this JSON file")
    bench.set_defaults(func=cmd_bench)

    sub.add_parser("compare", help="compare finished runs (see 'rljax compare --help')",
                   add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``rljax`` command; returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "compare":
        from rljax.compare import main as compare_main

        return compare_main(argv[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        return args.func(args)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except (ValueError, FileExistsError) as err:
        from rljax.config import ConfigError
        from rljax.io import OutputExistsError

        if isinstance(err, ConfigError | OutputExistsError):
            print(f"error: {err}", file=sys.stderr)
            return EXIT_USAGE
        raise


if __name__ == "__main__":
    sys.exit(main())
