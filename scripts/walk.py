"""The walk a newcomer takes reading a command's code: from its `cli.py` function, every ssmprof function it calls,
depth first, each read once, resolved through the imports (static: no code runs).

    python scripts/walk.py report      # cli.report
    python scripts/walk.py profile --path
    python scripts/walk.py report --as-of e9ba793   # also: today's walk through the functions that walk read then

Counts, for the walk as a sequence of modules (consecutive functions of one module are one stay):
- stays: the modules entered, in reading order;
- rooms: distinct modules;
- returns: stays in a module read before;
- back-ups: consecutive stays where the reader goes back up a layer (done with a lower layer, back to a caller's);
- climbs: calls into a layer the caller's layer may not import (docs/architecture.md), sideways or upwards.

`--as-of REV` tells a tangle from growth: the walk at git revision REV, and today's walk through only the functions
that one read (by qualified name, wherever they live now), so that functions added since do not count.
"""

from __future__ import annotations

import argparse
import ast
import io
import subprocess
import tarfile
import tempfile
from pathlib import Path

from layer_table import layer_name, layer_table

PACKAGE = Path(__file__).resolve().parents[1] / "ssmprof"
# docs/architecture.md's table: the layers, lowest first as a reader descends from the command, and what each may
# call besides itself
LAYERS = tuple(dict.fromkeys(layer_name(path) for path in layer_table()))
ALLOWED = {layer_name(path): {layer_name(allowed) for allowed in allowances if allowed != "nothing"}
           for path, allowances in layer_table().items()}


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> str:
    return module.split(".")[1] if "." in module else module


def layer_of(module: str) -> int:
    return LAYERS.index(layer(module)) if layer(module) in LAYERS else len(LAYERS)


def climbs_into(caller: str, callee: str) -> bool:
    return layer(callee) != layer(caller) and layer(callee) not in ALLOWED.get(layer(caller), set(LAYERS))


class Module:
    def __init__(self, name: str, tree: ast.Module):
        self.name = name
        self.functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.aliases: dict[str, tuple[str, str | None]] = {}  # name -> (module, name in it; None: the module)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self.functions[f"{node.name}.{item.name}"] = item
        for any_node in ast.walk(tree):  # module-level and function-level imports alike
            if isinstance(any_node, ast.ImportFrom) and any_node.module and any_node.module.startswith("ssmprof"):
                for alias in any_node.names:
                    self.aliases[alias.asname or alias.name] = (any_node.module, alias.name)
            elif isinstance(any_node, ast.Import):
                for alias in any_node.names:
                    if alias.name.startswith("ssmprof"):
                        self.aliases[alias.asname or alias.name] = (alias.name, None)


def load(package: Path = PACKAGE) -> dict[str, Module]:
    return {module_name(path, package): Module(module_name(path, package), ast.parse(path.read_text()))
            for path in package.rglob("*.py")}


def callees(modules: dict[str, Module], module: Module, function: ast.AST) -> list[tuple[str, str]]:
    found = []
    for node in ast.walk(function):
        if not isinstance(node, ast.Call):
            continue
        target = node.func
        if isinstance(target, ast.Name):
            found += _resolve(modules, module, target.id, None)
        elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
            found += _resolve(modules, module, target.value.id, target.attr)
    return found


def _resolve(modules, module: Module, name: str, attr: str | None) -> list[tuple[str, str]]:
    if attr is None and name in module.functions:
        return [(module.name, name)]
    if name in module.aliases:
        source, imported = module.aliases[name]
        if imported is None or f"{source}.{imported}" in modules:  # a module: `measure.profile(...)`
            target = modules.get(source if imported is None else f"{source}.{imported}")
            return [(target.name, attr)] if target and attr is not None and attr in target.functions else []
        target = modules.get(source)
        if target is None:
            return []
        qualname = imported if attr is None else f"{imported}.{attr}"
        if qualname in target.functions:
            return [(target.name, qualname)]
        if attr is None and f"{imported}.__init__" in target.functions:
            return [(target.name, f"{imported}.__init__")]
    return []


def walk(entry: str, package: Path = PACKAGE) -> list[tuple[str, str, str]]:
    """(caller module, module, function) in reading order, each function once."""
    modules, seen, order = load(package), set(), []

    def visit(caller: str, module: str, function: str):
        if (module, function) in seen:
            return
        seen.add((module, function))
        order.append((caller, module, function))
        for callee in callees(modules, modules[module], modules[module].functions[function]):
            visit(module, *callee)

    visit("ssmprof.cli", "ssmprof.cli", entry)
    return order


def summary(order: list[tuple[str, str, str]]) -> dict[str, int]:
    stays: list[str] = []
    visited: set[str] = set()
    returns = 0
    for _, module, _ in order:
        if not stays or stays[-1] != module:
            returns += module in visited
            stays.append(module)
            visited.add(module)
    back_ups = sum(layer_of(after) > layer_of(before) for before, after in zip(stays, stays[1:], strict=False))
    climbs = sum(climbs_into(caller, callee) for caller, callee, _ in order)
    return {"stays": len(stays), "rooms": len(visited), "returns": returns, "back-ups": back_ups,
            "climbs": climbs, "functions": len(order)}


def walk_at(entry: str, revision: str) -> list[tuple[str, str, str]]:
    """The walk of the package as git revision `revision` holds it."""
    archive = subprocess.run(["git", "archive", "--format=tar", revision, "ssmprof"], cwd=PACKAGE.parent,
                             capture_output=True, check=True).stdout
    with tempfile.TemporaryDirectory() as folder:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(folder, filter="data")
        return walk(entry, Path(folder) / "ssmprof")


def through(order: list[tuple[str, str, str]], earlier: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """`order` through only the functions (qualified names) that the walk `earlier` read."""
    names = {function for _, _, function in earlier}
    return [step for step in order if step[2] in names]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", help="a function of ssmprof/cli.py, e.g. report")
    parser.add_argument("--path", action="store_true", help="print the walk itself")
    parser.add_argument("--as-of", metavar="REV", help="also the walk at git revision REV, and today's through the "
                        "functions that one read")
    args = parser.parse_args()
    order = walk(args.command)
    if args.path:
        for caller, module, function in order:
            climb = " (climbs)" if climbs_into(caller, module) else ""
            print(f"{module}.{function}{climb}")
    print(", ".join(f"{key} {value}" for key, value in summary(order).items()))
    if args.as_of:
        earlier = walk_at(args.command, args.as_of)
        print(f"at {args.as_of}:", ", ".join(f"{key} {value}" for key, value in summary(earlier).items()))
        print(f"today through the functions read at {args.as_of}:",
              ", ".join(f"{key} {value}" for key, value in summary(through(order, earlier)).items()))


if __name__ == "__main__":
    main()
