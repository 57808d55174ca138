"""The imports a Python module runs for certain, read with `ast` (nothing is imported).

An import runs for certain when nothing can skip it: it is not inside an `if` (verl guards
platform code with `if is_npu_available:` and the like), nor inside a `try` that handles an
exception (`try: import x / except ImportError:`), nor under `if TYPE_CHECKING:`. A module's
import-time imports are those of its body and of its class bodies (which run at import);
a function's are those of its own body, run when it is called. What a guarded import needs is
left out: the offline check of the training stack (tools/training_stack.py) asks only what a
code path cannot do without.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

# (module, name): `import a.b` is ("a.b", None); `from a.b import c` is ("a.b", "c"), where c
# may be a submodule of a.b or a name in it.
Import = tuple[str, "str | None"]


@dataclass
class ModuleImports:
    """What one module imports for certain: at import time, and in each function when called."""

    at_import: list[Import] = field(default_factory=list)
    functions: dict[str, list[Import]] = field(default_factory=dict)


def read(source: str, module: str, is_package: bool) -> ModuleImports:
    """The certain imports of `source`, the text of `module` (a package's `__init__`)."""
    found = ModuleImports()
    _body(ast.parse(source).body, module, is_package, found.at_import, found, prefix="")
    return found


def _body(statements: list[ast.stmt], module: str, is_package: bool, into: list[Import],
          found: ModuleImports, prefix: str) -> None:
    for node in statements:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            into.extend(_names(node, module, is_package))
        elif isinstance(node, ast.ClassDef):
            # A class body runs where the class is defined; its methods are functions.
            _body(node.body, module, is_package, into, found, prefix=f"{prefix}{node.name}.")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            own: list[Import] = []
            _body(node.body, module, is_package, own, found, prefix=f"{prefix}{node.name}.")
            found.functions[f"{prefix}{node.name}"] = own
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            _body(node.body, module, is_package, into, found, prefix)
        elif isinstance(node, ast.Try) and not node.handlers:
            _body(node.body + node.finalbody, module, is_package, into, found, prefix)
        else:
            # if, try with handlers, loops, match: what they hold may not run. Functions and
            # classes defined inside them are still read, for their own bodies.
            _body(list(_definitions(node)), module, is_package, [], found, prefix)


def _definitions(node: ast.AST):
    """The functions and classes defined inside `node`, not those nested in them."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield child
        else:
            yield from _definitions(child)


def _names(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[Import]:
    if isinstance(node, ast.Import):
        return [(alias.name, None) for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join(package + ([base] if base else []))
    return [(base, alias.name) for alias in node.names]
