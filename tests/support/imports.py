"""What a module of the package imports when it runs, followed down through the package."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path


def runtime_imports(module: str) -> set[str]:
    """The modules ``module`` imports at run time (not under TYPE_CHECKING), resolved."""
    spec = importlib.util.find_spec(module)
    assert spec is not None, module
    assert spec.origin is not None, module
    package = module if spec.submodule_search_locations else module.rpartition(".")[0]
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:  # the module's own top level: TYPE_CHECKING blocks are ifs
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            relative = "." * node.level + (node.module or "")
            names.add(importlib.util.resolve_name(relative, package) if node.level else relative)
    return names


def imports_reached(module: str) -> tuple[set[str], set[str]]:
    """The package's modules ``module`` reaches, and every other module they import."""
    seen: set[str] = set()
    outside: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        seen.add(name)
        for imported in runtime_imports(name):
            if imported.startswith("follower."):
                if imported not in seen:
                    todo.append(imported)
            else:
                outside.add(imported.split(".")[0])
    return seen, outside
