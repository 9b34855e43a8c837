"""The apps' import graph against DESIGN's floors (../shared/DESIGN.md §3, written down here as
data): no module imports one of a higher floor, and no application modules import each other
round in a cycle. Read from the source (every ``import``, at the top of a module or inside a
function), not from what happens to be loaded."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parent.parent
PACKAGES = ("accounts", "images", "sessions", "memory", "skills", "mirix_site")

# Lowest first (DESIGN: accounts <- providers <- search <- images <- sessions <- memory <- skills,
# with the api kit between accounts and the apps' endpoints). A module belongs to the floor of
# its longest listed prefix; a module may import its own floor and those below it. The helpers
# with no domain (mirix_site.common) and the console's kit sit below every app; the rest of
# `mirix_site` is wiring (settings, urls, Celery and its broker transport, wsgi, health, the
# launcher, the MCP program, the admin site), above every app.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("mirix_site.common",),
    # The console's kit: every app draws its dashboard panels with it and registers them there.
    ("mirix_site.console",),
    ("accounts",),
    # The DRF kit rests on accounts (keys, tenants); accounts' own endpoints on the kit.
    ("mirix_site.api",),
    ("accounts.api",),
    ("mirix_site.providers",),
    ("mirix_site.search",),
    ("images",),
    ("sessions",),
    ("memory",),
    ("skills",),
    # The admin site whose index shows the panels, and the server's health beside them.
    ("mirix_site", "mirix_site.console.site"),
)


def _modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (PROJECT_DIR / package).rglob("*.py"):
            if "migrations" in path.parts:  # history, not structure: it names old homes
                continue
            parts = list(path.relative_to(PROJECT_DIR).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The project module an imported name lives in (None: not the project's)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str, path: Path) -> Iterator[tuple[str, bool]]:
    """(imported project module, whether only for type checking) for each import."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def visit(node: ast.AST, typing_only: bool) -> Iterator[tuple[str, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                names = [f"{base}.{alias.name}" for alias in child.names]
            else:
                yield from visit(
                    child, typing_only or (isinstance(child, ast.If) and _type_checking(child))
                )
                continue
            for name in names:
                target = _resolve(name)
                if target is not None and target != module:
                    yield target, typing_only

    yield from visit(ast.parse(path.read_text()), False)


EDGES = {module: sorted(set(_imports(module, path))) for module, path in sorted(MODULES.items())}


def floor_of(module: str) -> int:
    best, best_length = -1, -1
    for index, prefixes in enumerate(FLOORS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_length:
                best, best_length = index, len(prefix)
    assert best >= 0, f"{module} is on no floor: add it to FLOORS"
    return best


def test_every_module_is_on_a_floor() -> None:
    for module in MODULES:
        floor_of(module)


def test_no_module_imports_from_a_higher_floor() -> None:
    upward = [
        f"{module} (floor {floor_of(module)}) imports {target} (floor {floor_of(target)})"
        for module, targets in EDGES.items()
        for target, _typing_only in targets
        if floor_of(target) > floor_of(module)
    ]
    assert upward == []


def _cycles(edges: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, ()):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in edges:
        if node not in index:
            connect(node)
    return found


def test_no_import_cycle_among_application_modules() -> None:
    """Imports made only for type annotations (``if TYPE_CHECKING:``) run never, and close no
    cycle; every other import counts, a function's own included."""
    runtime = {
        module: [target for target, typing_only in targets if not typing_only]
        for module, targets in EDGES.items()
    }
    assert _cycles(runtime) == []


def test_the_cycle_finder_finds_one() -> None:
    assert _cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]


def _caught_domain_errors(module: str, path: Path) -> Iterator[str]:
    """The exceptions a module's ``except`` clauses name that it imports from a project module
    outside the API layer (a service's or a selector's: a domain error)."""
    tree = ast.parse(path.read_text())
    imported = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                imported[alias.asname or alias.name] = node.module
    for node in ast.walk(tree):
        if not isinstance(node, ast.ExceptHandler) or node.type is None:
            continue
        caught = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
        for name in caught:
            source = imported.get(name.id) if isinstance(name, ast.Name) else None
            if source and _resolve(source) and ".api." not in f".{source}.":
                yield f"{module}:{node.lineno} catches {name.id} ({source})"


def test_no_view_catches_a_domain_error() -> None:
    """Domain errors (``mirix_site.common.errors``) are answered once, by the exception handler."""
    caught = [
        found
        for module, path in MODULES.items()
        if ".api." in f"{module}."
        for found in _caught_domain_errors(module, path)
    ]
    assert caught == []


# The benches' library modules (bench/__init__.py): what several benches share, never run on
# their own. Every other module of bench/ belongs to one bench: a package's to the package.
BENCH_LIBRARIES = frozenset(
    {
        "bench.common",
        "bench.memories_load",
        "bench.experiences_data",
        "bench.skills_common",
        "bench.retrieval_quality.datasets",
        "bench.retrieval_quality.ingest",
        "bench.retrieval_quality.scoring",
        "bench.retrieval_quality.report",
    }
)


def _bench_modules() -> dict[str, Path]:
    modules = {}
    for path in (PROJECT_DIR / "bench").rglob("*.py"):
        parts = list(path.relative_to(PROJECT_DIR).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _bench_imports(path: Path, modules: dict[str, Path]) -> Iterator[str]:
    """The modules of bench/ that a module imports, a function's own imports included."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            target = name
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != "bench":
                yield target


def test_no_bench_imports_another() -> None:
    """A bench imports library modules and its own package's; a library module only others."""
    modules = _bench_modules()
    assert sorted(BENCH_LIBRARIES - modules.keys()) == []

    def bench_of(module: str) -> str:
        return ".".join(module.split(".")[:2])

    wrong = [
        f"{module} imports {target}"
        for module, path in sorted(modules.items())
        for target in sorted(set(_bench_imports(path, modules)))
        if target != module
        and target not in BENCH_LIBRARIES
        and (module in BENCH_LIBRARIES or bench_of(target) != bench_of(module))
    ]
    assert wrong == []
