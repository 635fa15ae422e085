"""Results on disk: atomic writes, tidy parquet tables, run metadata.

Every writer here goes through :func:`atomic_write_bytes`: the bytes land in a temporary
file in the target's own directory, are flushed and fsynced, and then ``os.replace`` puts
them in place. A run killed at any moment leaves either the old file or the new one,
never a half-written file.
"""

from __future__ import annotations

import io
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd


class OutputExistsError(FileExistsError):
    """Raised when an output directory already holds files and overwrite was not asked."""


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temp file in the same dir + ``os.replace``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; results are for sharing
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write a UTF-8 text file atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as indented JSON atomically; numpy scalars and arrays become lists."""
    text = json.dumps(obj, indent=2, sort_keys=False, default=_json_default, allow_nan=True)
    return atomic_write_text(path, text + "\n")


def read_json(path: str | os.PathLike) -> Any:
    """Read a JSON file."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_parquet(path: str | os.PathLike, table: pd.DataFrame) -> Path:
    """Write a DataFrame as parquet atomically (serialised in memory, then replaced)."""
    buf = io.BytesIO()
    table.to_parquet(buf, index=False)
    return atomic_write_bytes(path, buf.getvalue())


def read_parquet(path: str | os.PathLike) -> pd.DataFrame:
    """Read a results table written by :func:`write_parquet`."""
    return pd.read_parquet(path)


def write_figure(path: str | os.PathLike, fig: Any, dpi: int = 120) -> Path:
    """Save a matplotlib figure as PNG atomically and close it."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())


def check_output_dir(path: str | os.PathLike, overwrite: bool) -> Path:
    """Check that results may be written to ``path``; creates nothing.

    A missing or empty directory is fine (the writers create it with the first file). A
    non-empty one raises :class:`OutputExistsError` unless ``overwrite`` is true; even
    then only the files a run writes are replaced (each atomically), nothing else in the
    directory is deleted.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputExistsError(f"--out: {path} exists and is not a directory")
    if path.is_dir() and any(path.iterdir()) and not overwrite:
        raise OutputExistsError(
            f"--out: {path} is not empty; pass --overwrite to replace its results"
        )
    return path


def run_metadata() -> dict[str, Any]:
    """Versions and machine facts recorded beside every run's config."""
    import jax

    meta: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.local_devices()],
        "process_count": jax.process_count(),
    }
    try:
        from importlib.metadata import version

        meta["rljax"] = version("rljax")
    except Exception:  # noqa: BLE001 - not installed as a distribution
        meta["rljax"] = "unknown"
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
        if rev.returncode == 0:
            meta["git_commit"] = rev.stdout.strip()
    except Exception:  # noqa: BLE001 - git missing is fine
        pass
    return meta
