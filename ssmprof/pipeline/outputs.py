"""Output paths checked before any expensive work: a training run or an Nsight Compute pass that ends in
"permission denied" wastes minutes of GPU time. Each check is one line (`InvalidConfig`) naming the path."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ssmprof.errors import InvalidConfig, SsmprofError
from ssmprof.reports.style import PLOTLY_JS


def _writable_ancestor(path: Path) -> Path:
    """The nearest existing folder at or above `path` (where the missing folders would be created)."""
    folder = path.absolute()
    while not folder.exists():
        folder = folder.parent
    return folder


def check_file(path: Path | None, option: str) -> None:
    """`path` can be written as a file: not a folder, and its folder exists or can be created."""
    if path is None:
        return
    try:
        if path.is_dir():
            raise InvalidConfig(f"{option} {path} is a folder: give a file name")
        if path.exists() and not os.access(path, os.W_OK):
            raise InvalidConfig(f"{option} {path} is not writable")
        _check_folder_creatable(path.parent, option, path)
    except OSError as exc:  # a name the file system refuses outright (too long, a component not a folder)
        raise InvalidConfig(f"cannot write {option} {path}: {exc.strerror or exc}") from None


def check_folder(path: Path | None, option: str) -> None:
    """`path` can hold new files: a folder that exists and is writable, or can be created."""
    if path is None:
        return
    try:
        if path.exists() and not path.is_dir():
            raise InvalidConfig(f"{option} {path} is a file, not a folder")
        _check_folder_creatable(path, option, path)
    except OSError as exc:  # a name the file system refuses outright (too long, a component not a folder)
        raise InvalidConfig(f"cannot write {option} {path}: {exc.strerror or exc}") from None


def _check_folder_creatable(folder: Path, option: str, named: Path) -> None:
    """The nearest existing folder takes a new file. `os.access` alone is not enough: it says yes to root for
    folders no one can write (/proc, a read-only bind mount), so a file is created there and removed again."""
    ancestor = _writable_ancestor(folder)
    refused = f"cannot write {option} {named}: {ancestor} is not a writable folder"
    if not ancestor.is_dir() or not os.access(ancestor, os.W_OK | os.X_OK):
        raise InvalidConfig(refused)
    try:
        with tempfile.NamedTemporaryFile(dir=ancestor, prefix=".ssmprof-write-check-"):
            pass
    except OSError:
        raise InvalidConfig(refused) from None


def write_text(path: Path, text: str) -> None:
    """Write `text` to `path`, its folder created; a failure (disk full, permissions) is one line. A page that
    loads plotly.js from beside it gets the library written there once (`write_plotly_js`)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if f'<script src="{PLOTLY_JS}">' in text:
            write_plotly_js(path.parent)
    except OSError as exc:
        raise SsmprofError(f"cannot write {path}: {exc.strerror or exc}") from None


def write_plotly_js(folder: Path) -> Path:
    """plotly.js (the version plotly.py bundles, read from the installed package: no network) as `PLOTLY_JS` in
    `folder`, where the pages of that folder load it; written once per folder, again only if it differs."""
    from plotly.offline import get_plotlyjs

    library = get_plotlyjs()
    target = folder / PLOTLY_JS
    if not target.exists() or target.stat().st_size != len(library.encode()):
        target.write_text(library)
    return target


def with_library(paths: list[Path]) -> list[Path]:
    """The files a command wrote, each page followed by the plotly.js it loads from beside it (written there by
    `write_text`): a page moved without that file draws no chart, so the user is told it is part of the page."""
    written: list[Path] = []
    for path in map(Path, paths):
        written.append(path)
        library = path.parent / PLOTLY_JS
        if path.suffix == ".html" and library.is_file() and library not in written:
            written.append(library)
    return written
