"""A workload from the user's own code: `path/to/my_model.py:MyWorkload` or `package.module:MyWorkload`.

The named class (or instance) must be a `Workload` (docs/own-model.md). It is checked when it is loaded (the
methods the contract asks for, name, unit, ops, presets) and wrapped (`UserWorkload`) so that what its methods
return is checked where the harness uses it, and an exception raised inside the user's code becomes one line
naming the user's file and line: a user reads "my_model.py:41: ..." about their own code, never a traceback
through the harness. A GPU out-of-memory passes unchanged: the harness types it (`harness.typed_failures`).

A file is imported as `python my_model.py` would see its folder (put first on `sys.path`, so files beside it
import), under a module name of its own; the spec other processes get (`Workload.spec`) holds its absolute path.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import re
import sys
import types
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ssmprof.errors import SsmprofError, UserCodeFailed, UserWorkloadInvalid
from ssmprof.kernels import OPS, KernelPlan
from ssmprof.workloads.base import CommonConfig, Workload

SEPARATOR = ":"
GUIDE = "docs/own-model.md"
# A workload's name names its run directories (`<name>-<preset>-<stamp>`): a folder name, no path.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def is_user_spec(name: str) -> bool:
    """Whether a workload name is `file.py:Name` or `module:Name` (the suite's names hold no colon)."""
    target, separator, attribute = name.rpartition(SEPARATOR)
    return bool(separator and target and attribute)


@dataclass(frozen=True)
class Origin:
    """Where a user's workload was loaded from: the file its code lies in (with its sha256 as loaded, so a run
    says which version of the file it measured) and, for `module:Name`, the module."""

    spec: str  # absolute `file.py:Name`, or `module:Name`: what loads it again in any process and folder
    file: str
    sha256: str
    module: str | None = None

    def record(self) -> dict[str, str]:
        return {key: value for key, value in vars(self).items() if value is not None}


# Each spec (its file path resolved) loaded once per process: a sweep or suite asks for it again at every point.
_LOADED: dict[str, UserWorkload] = {}


def load_user_workload(spec: str, reserved: Collection[str] = ()) -> Workload:
    """The workload `spec` names, checked against the contract and wrapped (`UserWorkload`); `reserved`: names
    it may not take (the suite's: a run named like one would be compared and gated against it). Loaded once per
    process and spec."""
    target, _, attribute = spec.rpartition(SEPARATOR)
    as_file = target.endswith(".py") or "/" in target
    resolved = f"{Path(target).resolve()}{SEPARATOR}{attribute}" if as_file else spec
    if resolved not in _LOADED:
        module = _import_file(Path(target).resolve()) if as_file else _import_module(target)
        _LOADED[resolved] = _checked(module, attribute, resolved, None if as_file else target)
    workload = _LOADED[resolved]
    if workload.name in reserved:
        raise UserWorkloadInvalid(f"{workload.where}: name '{workload.name}' is a workload of the suite's: give "
                                  "yours a name of its own")
    return workload


def _import_file(path: Path) -> types.ModuleType:
    if not path.is_file():
        raise UserWorkloadInvalid(f"{path}: no such file")
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
    name = f"_ssmprof_user_{re.sub(r'[^0-9A-Za-z_]', '_', path.stem)}_{digest}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise UserWorkloadInvalid(f"{path}: not a Python file Python can import")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # dataclasses and typing look a class's module up here
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    try:
        module_spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        del sys.modules[name]
        raise UserWorkloadInvalid(f"{_line_in(exc, path)}: {_described(exc)} (importing it)") from exc
    return module


def _import_module(target: str) -> types.ModuleType:
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (target == exc.name or target.startswith(exc.name + ".")):
            raise UserWorkloadInvalid(f"no module '{target}' (from the workload '{target}{SEPARATOR}...'): "
                                      "install it, or put its folder on PYTHONPATH") from None
        raise UserWorkloadInvalid(f"{_line_in(exc, _module_file(target, exc))}: {_described(exc)} (importing "
                                  f"{target})") from exc
    except (Exception, SystemExit) as exc:
        raise UserWorkloadInvalid(f"{_line_in(exc, _module_file(target, exc))}: {_described(exc)} (importing "
                                  f"{target})") from exc


def _module_file(target: str, exc: BaseException) -> Path | None:
    """The file of the module that failed to import, where Python can find it without importing it again (its
    packages imported); else the file of the innermost frame the exception passed through."""
    try:
        found = importlib.util.find_spec(target)
    except (Exception, SystemExit):
        found = None
    if found is not None and found.origin and Path(found.origin).is_file():
        return Path(found.origin).resolve()
    return _innermost_file(exc)


def _checked(module: types.ModuleType, attribute: str, spec: str, module_name: str | None) -> UserWorkload:
    """The module's `attribute` as a checked workload, or one line saying what of the contract it misses."""
    path = Path(module.__file__ or "")
    found = getattr(module, attribute, None)
    if found is None:
        defined = [name for name, value in vars(module).items()
                   if inspect.isclass(value) and issubclass(value, Workload) and value.__module__ == module.__name__]
        hint = f"its Workload classes: {', '.join(defined)}" if defined else "it defines no Workload class"
        raise UserWorkloadInvalid(f"{path}: has no '{attribute}' ({hint})")
    where = f"{path}:{_defined_at(found)}" if _defined_at(found) else str(path)
    cls = found if inspect.isclass(found) else type(found)
    if not issubclass(cls, Workload):
        what = "a class" if inspect.isclass(found) else f"a {type(found).__name__}"
        raise UserWorkloadInvalid(f"{where}: '{attribute}' is {what}, not an ssmprof Workload: derive it from "
                                  f"ssmprof.workloads.base.Workload ({GUIDE})")
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        raise UserWorkloadInvalid(f"{where}: {attribute} does not define {missing} (the Workload contract, "
                                  f"{GUIDE})")
    workload: Workload = found
    if inspect.isclass(found):
        try:
            workload = cls()
        except Exception as exc:
            raise UserWorkloadInvalid(f"{_line_in(exc, path)}: {_described(exc)} (creating {attribute}())") \
                from exc
    problem = _contract_problem(workload)
    if problem:
        raise UserWorkloadInvalid(f"{where}: {attribute}.{problem} (the Workload contract, {GUIDE})")
    origin = Origin(spec, str(path), hashlib.sha256(path.read_bytes()).hexdigest(), module_name)
    return UserWorkload(workload, origin, where)


def _contract_problem(workload: Workload) -> str | None:
    """The first class attribute of the contract that is missing or of the wrong kind, as words; None if none."""
    name, unit, ops = (getattr(workload, key, None) for key in ("name", "unit", "ops"))
    presets = getattr(workload, "presets", None)
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        return f"name must be a folder name (letters, digits, '.', '_', '-'), got {name!r}"
    if not isinstance(unit, str) or not unit:
        return f"unit must say what throughput counts (e.g. 'tokens', 'samples'), got {unit!r}"
    if not isinstance(ops, tuple | list) or not all(op in OPS for op in ops):
        return f"ops must be a tuple of kernel ops among {', '.join(OPS)}, got {ops!r}"
    if not isinstance(presets, dict) or not presets:
        return f"presets must be a dict of named CommonConfig (at least one), got {presets!r}"
    wrong = [key for key, cfg in presets.items() if not isinstance(cfg, CommonConfig)]
    if wrong:
        return f"presets['{wrong[0]}'] must be a CommonConfig (a dataclass deriving it), got {presets[wrong[0]]!r}"
    return None


class UserWorkload(Workload):
    """A user's workload as the harness takes it: each method delegates to the user's, checks what it returns
    (cheap type checks, at every call), and turns an exception raised inside it into one line naming the user's
    file and line (`UserCodeFailed`)."""

    def __init__(self, inner: Workload, origin: Origin, where: str):
        self.inner, self.origin, self.where = inner, origin, where
        self.name, self.unit, self.ops = inner.name, inner.unit, tuple(inner.ops)
        self.description = getattr(inner, "description", "")
        self.presets, self.preset_notes = inner.presets, inner.preset_notes
        self.capture_blocker = inner.capture_blocker

    @property
    def spec(self) -> str:
        return self.origin.spec

    @property
    def source(self) -> dict[str, str]:
        return self.origin.record()

    def config(self, preset: str, overrides: dict[str, Any] | None = None) -> CommonConfig:
        return self._expect("config", CommonConfig, "a CommonConfig", preset, overrides)

    def validate(self, cfg: CommonConfig) -> None:
        self._call("validate", cfg)

    def kernel_ops(self, cfg: CommonConfig) -> tuple[str, ...]:
        ops = self._call("kernel_ops", cfg)
        if not isinstance(ops, tuple | list) or not all(op in OPS for op in ops):
            raise UserWorkloadInvalid(f"{self._at('kernel_ops')}: {self.name}.kernel_ops returned {ops!r}, not a "
                                      f"tuple of kernel ops among {', '.join(OPS)}")
        return tuple(ops)

    def build(self, cfg: CommonConfig, plan: KernelPlan) -> nn.Module:
        return self._expect("build", nn.Module, "a torch.nn.Module", cfg, plan)

    def batch(self, cfg: CommonConfig, device: torch.device, generator: torch.Generator) -> dict:
        return self._expect("batch", dict, "a dict", cfg, device, generator)

    def loss(self, model: nn.Module, batch: dict) -> torch.Tensor:
        loss = self._call("loss", model, batch)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.is_floating_point():
            got = f"a tensor of shape {tuple(loss.shape)} and dtype {loss.dtype}" \
                if isinstance(loss, torch.Tensor) else f"a {type(loss).__name__}"
            raise UserWorkloadInvalid(f"{self._at('loss')}: {self.name}.loss returned {got}, not a scalar floating "
                                      "tensor")
        if torch.is_grad_enabled() and not loss.requires_grad:
            raise UserWorkloadInvalid(f"{self._at('loss')}: {self.name}.loss returned a tensor that needs no gradient: "
                                      "compute it from the model's output, so backward reaches the parameters")
        return loss

    def items_per_step(self, cfg: CommonConfig) -> int:
        items = self._call("items_per_step", cfg)
        if isinstance(items, bool) or not isinstance(items, int) or items < 1:
            raise UserWorkloadInvalid(f"{self._at('items_per_step')}: {self.name}.items_per_step returned "
                                      f"{items!r}, not an int >= 1")
        return items

    def _expect(self, method: str, kind: type, described: str, *args: Any) -> Any:
        value = self._call(method, *args)
        if not isinstance(value, kind):
            raise UserWorkloadInvalid(f"{self._at(method)}: {self.name}.{method} returned a "
                                      f"{type(value).__name__}, not {described}")
        return value

    def _at(self, method: str) -> str:
        """`file:line` of the user's definition of `method` (the class's line where it is inherited)."""
        function = getattr(type(self.inner), method, None)
        try:
            inside = (function is not None
                      and Path(inspect.getsourcefile(function) or "").resolve() == Path(self.origin.file))
        except TypeError:
            inside = False
        line = _defined_at(function) if inside else None
        return f"{self.origin.file}:{line}" if line else self.where

    def _call(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self.inner, method)(*args)
        except (SsmprofError, torch.cuda.OutOfMemoryError):
            raise  # typed already, or the harness's to type
        except Exception as exc:
            raise UserCodeFailed(f"{_line_in(exc, Path(self.origin.file))}: {_described(exc)} (in "
                                 f"{self.name}.{method})") from exc


def failure_in_user_code(workload: Workload, exc: Exception) -> UserCodeFailed | None:
    """An exception that passed through a user's workload file outside its wrapped methods (in backward, through
    an autograd function of theirs) as one line naming its line; None for the suite's workloads, for a typed
    error, or where the user's file is not in the traceback."""
    if not isinstance(workload, UserWorkload) or isinstance(exc, SsmprofError):
        return None
    where = _line_in(exc, Path(workload.origin.file))
    if where == workload.origin.file:
        return None
    return UserCodeFailed(f"{where}: {_described(exc)} (in {workload.name}'s training step)")


def _line_in(exc: BaseException, path: Path | None) -> str:
    """`file:line` of the innermost frame in `path` the exception passed through (a syntax error: its own line);
    the file alone where none did."""
    if path is None:
        return "an unknown file"
    if isinstance(exc, SyntaxError) and exc.filename and Path(exc.filename).resolve() == path:
        return f"{path}:{exc.lineno}"
    line, tb = None, exc.__traceback__
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename).resolve() == path:
            line = tb.tb_lineno
        tb = tb.tb_next
    return f"{path}:{line}" if line else str(path)


def _innermost_file(exc: BaseException) -> Path | None:
    """The file of the innermost frame an exception passed through, outside Python's import machinery."""
    found, tb = None, exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not filename.startswith("<frozen"):
            found = Path(filename).resolve()
        tb = tb.tb_next
    if isinstance(exc, SyntaxError) and exc.filename:
        found = Path(exc.filename).resolve()
    return found


def _described(exc: BaseException) -> str:
    """`Type: first line of the message` (the type alone where the message is empty)."""
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _defined_at(found: object) -> int | None:
    """The line a class (or an instance's class) is defined at, where Python can tell."""
    try:
        source = found if inspect.isclass(found) or inspect.isfunction(found) else type(found)
        return inspect.getsourcelines(source)[1]
    except (OSError, TypeError):
        return None
