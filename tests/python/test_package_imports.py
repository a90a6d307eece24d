# SPDX-License-Identifier: Apache-2.0
"""The mooncake package's modules import each other one way only.

* No import cycle among the package's modules: every ``import`` and
  ``from ... import`` of a mooncake module is read from the sources (at
  module level and inside functions alike; ``if TYPE_CHECKING:`` blocks,
  which never run, aside), and the graph they make has no cycle.  A
  failure names each cycle's edges with their lines.
* Every module imports alone, in a fresh interpreter, without error.

The layers, lowest first: the native binding (``capi``), ``_errors``,
``_util``, ``_keys``, ``_hooks``, ``_malloc``, ``_tensor``, ``_fast_copy``,
``buffer_pool``, ``engine``; then ``store``; then
``structured_object_store``, ``async_store``, the services and the CLI;
then ``dataproto_catalog`` and ``reshard.weight`` (docs: each module's
opening docstring says what it may import).
"""

import ast
import importlib.machinery
import os
import subprocess
import sys

import pytest

import mooncake

# The package as it is imported (the build tree's links, or an install):
# the generated capi.py is there too.
PKG_DIR = os.path.dirname(os.path.abspath(mooncake.__file__))


def _modules():
    """{module name: source path, None for an extension module (_capi.so)}
    of every module of the package."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(PKG_DIR):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for f in sorted(filenames):
            path = os.path.join(dirpath, f)
            if f.endswith(".py"):
                rel = os.path.relpath(path, PKG_DIR)[:-3]
            elif any(f.endswith(s) for s in importlib.machinery.EXTENSION_SUFFIXES):
                rel, path = os.path.relpath(path, PKG_DIR).split(".", 1)[0], None
            else:
                continue
            parts = ["mooncake"] + rel.split(os.sep)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _enclosing_module(name):
    """The longest package module that ``name`` names or lies in, or None."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(test):
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(module, path):
    """[(imported module, line, "module" or "function")] of one module."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    is_pkg = os.path.basename(path) == "__init__.py"
    out = []

    def targets(node):
        if isinstance(node, ast.Import):
            return [_enclosing_module(a.name) for a in node.names]
        if node.level:
            base = module.split(".")
            if not is_pkg:
                base = base[:-1]
            base = base[:len(base) - (node.level - 1)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        # ``from pkg import name``: the submodule pkg.name when there is one.
        return [_enclosing_module(f"{prefix}.{a.name}") for a in node.names]

    def walk(node, where):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for sub in child.orelse:
                    walk(ast.Module(body=[sub], type_ignores=[]), where)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for t in targets(child):
                    if t and t != module:
                        out.append((t, child.lineno, where))
            inner = "function" if isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else where
            walk(child, inner)

    walk(tree, "module")
    return out


def _graph():
    return {m: _imports(m, p) if p else [] for m, p in MODULES.items()}


def _cycles(graph):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, comps = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w, _, _ in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return comps


def test_the_walk_finds_the_package_and_its_imports():
    """The check below looks at something: the modules and edges it must see."""
    graph = _graph()
    for name in ("mooncake", "mooncake.store", "mooncake.structured_object_store",
                 "mooncake.buffer_pool", "mooncake.reshard.weight.store"):
        assert name in graph, f"{name} should be among the package's modules"
    edges = {(m, t) for m, ts in graph.items() for t, _, _ in ts}
    assert ("mooncake.store", "mooncake.buffer_pool") in edges, \
        "store imports buffer_pool at module level, and the walk should see it"
    assert ("mooncake.structured_object_store", "mooncake.store") in edges, \
        "structured_object_store imports store inside a function, and the walk should see it"


def test_the_cycle_check_sees_a_function_level_cycle():
    graph = {"a": [("b", 1, "module")], "b": [("c", 2, "function")], "c": [("a", 3, "module")],
             "d": [("a", 4, "module")]}
    assert _cycles(graph) == [["a", "b", "c"]], "a -> b -> c -> a should be one cycle"


def test_no_import_cycle_among_the_package_modules():
    graph = _graph()
    problems = []
    for comp in _cycles(graph):
        lines = sorted({f"  {m} -> {t} (line {line}, {where} level)"
                        for m in comp for t, line, where in graph[m] if t in comp})
        problems.append("cycle among " + ", ".join(comp) + ":\n" + "\n".join(lines))
    assert not problems, "the package's modules should import one way only; " \
        "move what both sides need into a private module:\n" + "\n".join(problems)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_each_module_imports_alone_in_a_fresh_interpreter(module):
    out = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True,
                         text=True, timeout=120, env=dict(os.environ))
    assert out.returncode == 0, f"import {module} in a fresh interpreter should succeed:\n" \
        f"{out.stderr[-3000:]}"
