"""Build the HTML API reference of the ``rljax`` package with pdoc.

    python scripts/build_api_docs.py              # writes docs/api/ (git-ignored)
    python scripts/build_api_docs.py --out DIR

The docstrings are Google style (``Args:`` / ``Returns:``) with reST roles such as
:class:`...`, rendered with pdoc's ``google`` docformat. Only ``rljax`` and its
submodules are documented; ``experiments/`` is never imported. On failure the script
prints one line on stderr and exits with status 1.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "docs" / "api"


def build(out: Path) -> Path:
    """Render the ``rljax`` API reference into ``out``; returns the path of its index page.

    Raises:
      RuntimeError: pdoc could not import a module of ``rljax`` or wrote no index page.
    """
    import pdoc
    import pdoc.render

    pdoc.render.configure(docformat="google", show_source=True, search=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pdoc.pdoc("rljax", output_directory=out)
    # pdoc skips (with a warning) a submodule it cannot import; a silent gap in the
    # reference is a failure here. Annotation warnings (a string annotation pdoc cannot
    # resolve is shown as written) are not.
    failed = [str(w.message).splitlines()[0] for w in caught
              if str(w.message).startswith(("Couldn't import", "Error loading"))]
    if failed:
        raise RuntimeError(failed[0])
    index = out / "rljax.html"
    if not index.is_file():
        raise RuntimeError(f"pdoc wrote no {index}")
    return index


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (0 on success, 1 with a one-line message)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"output directory (default {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    try:
        index = build(args.out)
    except Exception as err:  # one line, no traceback
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(f"error: build_api_docs: {message}", file=sys.stderr)
        return 1
    print(f"API reference written to {index.parent} (open {index})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
