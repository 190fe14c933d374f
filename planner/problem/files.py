"""Packaged files and model profiles: where they live, how a TOML/JSON file is read.

Model names in an instance (``model = "llama2-7b"``) are looked up as
``NAME.toml`` in: the directories of ``$PLANNER_MODEL_PATH``, a ``models/``
folder next to the instance file or one level up, and the packaged
``models/``.  This module sits below :mod:`planner.problem.instance` (whose
``with_model`` looks models up) and :mod:`planner.problem.io` (instances and
plans), so neither needs the other.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import math
import os
import re
import shutil
import sys
import tempfile
import unicodedata
import tomllib
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Sequence

from pydantic import ValidationError

from .errors import InputError, input_error_from_pydantic
from .model import ModelSpec

DEFAULT_INSTANCE = "edwc-llama2-13b"


def _root(kind: str) -> Path:
    package = Path(__file__).resolve().parents[1]   # planner/
    packaged = package / "_data" / kind
    return packaged if packaged.is_dir() else package.parent / kind


def models_dir() -> Path:
    """The packaged model profiles."""
    return _root("models")


def instances_dir() -> Path:
    """The packaged instances."""
    return _root("instances")


def read_text(path: str | Path) -> str:
    """A file's text (UTF-8); ``InputError`` naming the file when it is missing, a
    directory, unreadable or not UTF-8 text (with the line of the first bad byte)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError("no such file", file=str(path)) from None
    except IsADirectoryError:
        raise InputError("is a directory, not a file", file=str(path)) from None
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror or err}", file=str(path)) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise InputError(f"not UTF-8 text: byte 0x{raw[err.start]:02x} at line {line} "
                         "(a binary file, or text saved in another encoding)", file=str(path)) from None


def read_mapping(path: Path) -> dict:
    text = read_text(path)
    try:
        if path.suffix == ".json":
            data = json.loads(text)
        else:
            data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise InputError(f"not valid TOML: {err}", file=str(path)) from None
    except json.JSONDecodeError as err:
        raise InputError(f"not valid JSON: {err.msg} at line {err.lineno} column {err.colno}",
                         file=str(path)) from None
    if not isinstance(data, dict):
        raise InputError("expected a table/object at the top level", file=str(path))
    data.pop("$schema", None)  # an editor's pointer to the file's JSON Schema (docs/schemas/)
    return data


def load_model(path: str | Path) -> ModelSpec:
    """Read a model profile TOML; raise ``InputError`` naming file and field."""
    path = Path(path)
    data = read_mapping(path)
    try:
        return ModelSpec.model_validate(data)
    except ValidationError as err:
        raise input_error_from_pydantic(err).with_file(path) from None


def find_model(name: str, near: Path | None = None) -> Path | None:
    """Path of model ``name`` (see module docstring), or None."""
    dirs = [Path(p) for p in os.environ.get("PLANNER_MODEL_PATH", "").split(os.pathsep) if p]
    if near is not None:
        dirs += [near / "models", near.parent / "models"]
    dirs.append(models_dir())
    for d in dirs:
        cand = d / f"{name}.toml"
        if cand.is_file():
            return cand
    return None


def available(kind: str) -> list[str]:
    """Names of the packaged instances (one job, ``[workload]``), multi-job instances
    (``"multi-instances"``: ``[[jobs]]``, SPEC 10) or models."""
    root = models_dir() if kind == "models" else instances_dir()
    names = sorted(p for p in root.glob("*.toml") if not p.name.startswith("_")) + \
        sorted(p for p in root.glob("*.json") if not p.name.startswith("_"))
    if kind == "instances":
        names = [p for p in names if not _has_jobs(p)]
    elif kind == "multi-instances":
        names = [p for p in names if _has_jobs(p)]
    return [p.stem for p in names]


_JOBS_TOML = re.compile(r"^\s*\[\[\s*jobs\s*\]\]", re.MULTILINE)


def _has_jobs(path: Path) -> bool:
    """Whether the instance file at ``path`` lists ``[[jobs]]`` (a TOML array of tables, or a
    JSON ``"jobs"`` key); an unreadable file counts as a one-job one (its loader says why)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except ValueError:
            return False
        return isinstance(data, dict) and "jobs" in data
    return bool(_JOBS_TOML.search(text))


def _plain_mode(path: Path, default: int) -> int:
    """The permission bits ``path`` has, or (it does not exist) what a plain
    ``open``/``mkdir`` would give under the umask (``default``: 0o666 or 0o777)."""
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return default & ~mask


@contextmanager
def atomic_path(path: str | Path):
    """Yield a temporary path beside ``path``; when the block ends without an
    error, it replaces ``path`` in one rename (a crash or Ctrl-C never leaves a
    half-written file); otherwise it is removed and ``path`` is untouched.

    >>> with atomic_path("plan.json") as tmp:        # doctest: +SKIP
    ...     tmp.write_text("{}")
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part" + path.suffix, dir=path.parent or ".")
    os.close(fd)
    tmp = Path(tmp)
    try:
        yield tmp
        # mkstemp makes the file 0600; give it the mode a plain open() would (or the old file's)
        os.chmod(tmp, _plain_mode(path, 0o666))
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _strict(value, reasons: dict, where: str):
    if isinstance(value, float) and not math.isfinite(value):
        reasons[where] = "infinite" if math.isinf(value) else "not a number"
        return None
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out[k] = _strict(v, reasons, f"{where}.{k}" if where else str(k))
        return out
    if isinstance(value, (list, tuple)):
        return [_strict(v, reasons, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


def strict_json(data, indent: int | None = 2) -> str:
    """``data`` as strict JSON: no ``Infinity``/``NaN`` tokens.  A non-finite
    number becomes ``null`` and, when ``data`` is an object, its key
    ``null_reasons`` maps the dotted path of each such value to why
    (``"infinite"``, ``"not a number"``)."""
    reasons: dict = {}
    clean = _strict(data, reasons, "")
    if reasons and isinstance(clean, dict):
        clean["null_reasons"] = reasons
    return json.dumps(clean, indent=indent, allow_nan=False)


def write_files(root: str | Path, files: dict[str, str]) -> list[Path]:
    """Write ``files`` (path relative to ``root`` -> text) under ``root``, creating folders,
    each file atomically (:func:`write_atomic`); ``*.sh`` files are made executable.
    Returns the paths written; ``InputError`` naming the file when one cannot be written.

    >>> write_files("job", {"README.md": "...", "launch/a.sh": "#!/bin/sh"})   # doctest: +SKIP
    [PosixPath('job/README.md'), PosixPath('job/launch/a.sh')]
    """
    for rel in files:
        _check_relative(rel, root)
    out = []
    for rel, text in files.items():
        path = Path(root) / rel
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, text)
            path.chmod(0o755 if path.suffix == ".sh" else 0o644)
        except OSError as err:
            raise InputError(f"cannot write: {err.strerror or err}", file=str(path)) from None
        out.append(path)
    return out


def _check_relative(rel: str, root) -> None:
    """Refuse (``InputError``) a file name that would leave ``root``: absolute, with ``..``,
    ``.`` or empty parts, or with a control character."""
    parts = PurePosixPath(rel).parts
    if (not parts or PurePosixPath(rel).is_absolute() or "\\" in rel
            or any(p in ("", ".", "..") for p in parts) or rel != "/".join(parts)
            or any(unicodedata.category(c) in ("Cc", "Cs") for c in rel)):
        raise InputError(f"refusing to write {rel!r}: not a plain path inside the folder", file=str(root))


def check_folder(root: str | Path, option: str = "--out", *, force: bool = False, force_flag: str = "--force",
                 inputs=(), marker: Sequence[str] = ()) -> None:
    """Refuse (``InputError`` naming ``option``, exit 2), before any work, an output folder
    :func:`write_folder` must not fill: a path that is not a folder; a folder holding one of
    the ``inputs`` files; a non-empty folder without ``force``; with ``force``, a folder that
    holds the current directory or lacks one of the ``marker`` files (an earlier output of the
    same command: ``force`` replaces that, not a folder of other files)."""
    root = Path(root)
    if not root.exists():
        if root.is_symlink():
            raise InputError(f"{root} is a broken symbolic link", option)
        parent = root.absolute().parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not (parent.is_dir() and os.access(parent, os.W_OK | os.X_OK)):
            raise InputError(f"cannot create {root}: {parent} is not a writable folder", option)
        return
    if not root.is_dir():
        raise InputError(f"{root} exists and is not a folder", option)
    here = root.resolve()
    for src in inputs:
        if src is not None and Path(src).exists() and here in Path(src).resolve().parents:
            raise InputError(f"{root} holds {src}, an input file of this command; refusing to replace the "
                             "folder (write to another folder)", option)
    if not any(root.iterdir()):
        return
    if not force:
        raise InputError(f"{root} is not empty; refusing to mix new files with what it holds (choose a new or "
                         f"empty folder, or {force_flag} to replace the whole folder)", option)
    cwd = Path.cwd().resolve()
    if here == cwd or here in cwd.parents:
        raise InputError(f"{root} holds the current directory; {force_flag} will not replace it", option)
    missing = [m for m in marker if not (root / m).is_file()]
    if missing:
        raise InputError(f"{root} holds files but no {' and no '.join(missing)}, so it is not an earlier output of "
                         f"this command, the only folder {force_flag} replaces; choose a new or empty folder", option)


@contextmanager
def new_folder(root: str | Path, option: str = "--out", *, force: bool = False, force_flag: str = "--force",
               inputs=(), marker: Sequence[str] = ()):
    """Yield a fresh empty folder beside ``root`` to fill; when the block ends without an
    error, it takes ``root``'s place in one rename, so ``root`` holds exactly what the block
    wrote.  A missing or empty ``root`` is replaced; a non-empty one only with ``force``
    (after :func:`check_folder`, which runs first), exchanged atomically where the system
    can (Linux ``renameat2``), its old contents then removed.  An error or Ctrl-C inside
    the block leaves ``root`` as it was.  ``root`` a symbolic link: its folder is replaced.

    >>> with new_folder("results") as tmp:        # doctest: +SKIP
    ...     (tmp / "table.md").write_text("...")
    """
    root = Path(root)
    check_folder(root, option, force=force, force_flag=force_flag, inputs=inputs, marker=marker)
    root = root.resolve() if root.is_symlink() else root
    parent = root.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", suffix=".part", dir=parent))
    except OSError as err:
        raise InputError(f"cannot create a folder in {parent}: {err.strerror or err}", option) from None
    try:
        yield tmp
        mode = _plain_mode(root, 0o777)
        try:
            os.chmod(tmp, mode)
            if root.is_dir() and any(root.iterdir()):
                _exchange(tmp, root)  # tmp now holds the old contents, removed below
            else:
                os.replace(tmp, root)  # a missing or empty folder
        except OSError as err:
            raise InputError(f"cannot replace {root}: {err.strerror or err}", option) from None
    finally:
        if tmp.exists() or tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)


def write_folder(root: str | Path, files: dict[str, str], option: str = "--out", *, force: bool = False,
                 force_flag: str = "--force", inputs=(), marker: Sequence[str] = ()) -> list[Path]:
    """Make ``root`` a folder holding exactly ``files`` (relative path -> text; ``*.sh``
    executable), all at once (:func:`new_folder`; the same ``force``, ``inputs``, ``marker``).
    A file name that would leave the folder is refused (``InputError``).  Returns the paths.

    >>> write_folder("job", {"README.md": "...", "launch/a.sh": "#!/bin/sh"})   # doctest: +SKIP
    [PosixPath('job/README.md'), PosixPath('job/launch/a.sh')]
    """
    for rel in files:
        _check_relative(rel, root)
    with new_folder(root, option, force=force, force_flag=force_flag, inputs=inputs, marker=marker) as tmp:
        write_files(tmp, files)
    return [Path(root) / rel for rel in files]


def _exchange(a: Path, b: Path) -> None:
    """Swap the folders ``a`` and ``b`` in one step (Linux ``renameat2(RENAME_EXCHANGE)``); where
    the system has no such call, two renames (``b`` is briefly missing; a failure puts it back)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = getattr(libc, "renameat2", None)
        if fn is not None:
            at_fdcwd, rename_exchange = -100, 2
            if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
                return
            errno = ctypes.get_errno()
            if errno not in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: no exchange here, rename twice
                raise OSError(errno, os.strerror(errno), str(b))
    old = Path(tempfile.mkdtemp(prefix=f".{b.name}.", suffix=".old", dir=b.parent))
    os.rmdir(old)
    os.rename(b, old)
    try:
        os.rename(a, b)
    except OSError:
        os.rename(old, b)
        raise
    os.rename(old, a)


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` atomically (:func:`atomic_path`)."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())



def _toml_key(key: str) -> str:
    return key if key and all(c.isascii() and (c.isalnum() or c in "-_") for c in key) else _toml_str(key)


def _toml_str(text: str) -> str:
    # JSON's escapes (\" \\ \n \t \uXXXX ...) are TOML's; TOML also wants DEL escaped
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml_value(v, where: str) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"{where}: {v} has no place in an instance file")
        return repr(v)
    if isinstance(v, str):
        return _toml_str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x, f"{where}[{i}]") for i, x in enumerate(v)) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(x, f'{where}.{k}')}" for k, x in v.items()) + "}"
    raise ValueError(f"{where}: cannot write {type(v).__name__} as TOML")


def _toml_table(data: dict, path: list[str], out: list[str]) -> None:
    def is_aot(v):
        return isinstance(v, list) and v and all(isinstance(x, dict) for x in v)

    for k, v in data.items():
        if not isinstance(v, dict) and not is_aot(v):
            out.append(f"{_toml_key(k)} = {_toml_value(v, '.'.join(path + [k]))}")
    for k, v in data.items():
        sub = path + [k]
        name = ".".join(_toml_key(p) for p in sub)
        if isinstance(v, dict):
            out += ["", f"[{name}]"]
            _toml_table(v, sub, out)
        elif is_aot(v):
            for x in v:
                out += ["", f"[[{name}]]"]
                _toml_table(x, sub, out)


def toml_text(data: dict, header: Sequence[str] = ()) -> str:
    """``data`` (str, int, float, bool, lists and tables of them) as TOML text,
    after ``header`` as ``#`` comment lines.  Floats are written with ``repr``,
    so reading the text back gives the same numbers; tables and lists of
    tables become ``[table]`` and ``[[table]]`` sections, other lists stay on
    one line.

    >>> print(toml_text({"name": "x", "gpu": {"mfu": 0.45}, "sizes": [1, 2]}, ["made by hand"]), end="")
    # made by hand
    name = "x"
    sizes = [1, 2]
    <BLANKLINE>
    [gpu]
    mfu = 0.45
    """
    out: list[str] = []
    _toml_table(data, [], out)
    head = "".join(f"# {_toml_comment(line)}".rstrip() + "\n" for line in header)
    return head + "\n".join(out).lstrip("\n") + "\n"


def _toml_comment(text) -> str:
    """``text`` as the body of one TOML comment line: line breaks become spaces, and the other
    characters TOML forbids in a comment (controls but tab, DEL) are written as ``\\xNN``."""
    text = " ".join(str(text).splitlines())
    return "".join(c.encode("unicode_escape").decode("ascii") if (ord(c) < 32 and c != "\t") or c == "\x7f"
                   else c for c in text)


def code_version() -> str | None:
    """``git describe --always --dirty`` of the planner's source tree, or None
    (not a git checkout, or git missing): what results and trained policies
    record as the code that made them."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None
