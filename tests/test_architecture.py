"""The package's shape, checked from the source (see docs/architecture.md for the rules and their reasons).

Everything here reads files with ``ast``; only the torch checks import bertwatch, in a fresh interpreter.
Each failure names the modules or functions that break the rule.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "bertwatch"

# Lowest layer first; a module may import its own subpackage or a lower layer. Siblings share a number.
LAYERS = {
    "core": 1,
    "data": 2,
    "heads": 3,
    "tb": 4,
    "report": 5,
    "ablation": 6,
    "linguistics": 6,
    "analysis": 6,
    "options": 7,
    "ship": 7,
    "probe": 8,
    "callbacks": 9,
    "cli": 10,
}
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80
LONG_REASON = "Long because"  # a function over MAX_FUNCTION_LINES says why in its docstring with this marker
EXEMPT_FROM_LAYERS = {"bertwatch", "bertwatch.__main__"}  # the lazy root and `python -m bertwatch`


@dataclass(frozen=True)
class Import:
    source: str  # importing module, e.g. "bertwatch.report.html"
    target: str  # imported module, e.g. "bertwatch.report.figures"
    names: tuple[str, ...]  # names taken with `from target import ...` (empty for `import target`)
    aliases: tuple[tuple[str, str], ...]  # (local name, dotted module) of `import a.b as c` / `from a import b as c`
    line: int
    type_checking: bool  # inside `if TYPE_CHECKING:`


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def python_files(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


MODULES = {module_name(p): p for p in package_files()}


def is_package(name: str) -> bool:
    return MODULES.get(name, Path()).name == "__init__.py"


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def resolve_relative(source: str, level: int, module: str | None) -> str:
    base = source.split(".") if is_package(source) else source.split(".")[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([module] if module else []))


def imports_of(path: Path) -> list[Import]:
    source = module_name(path)
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[Import] = []

    def visit(node: ast.AST, type_checking: bool) -> None:
        if isinstance(node, ast.If) and is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, type_checking)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound = ((alias.asname, alias.name),) if alias.asname else ()
                found.append(Import(source, alias.name, (), bound, node.lineno, type_checking))
        elif isinstance(node, ast.ImportFrom):
            target = resolve_relative(source, node.level, node.module) if node.level else (node.module or "")
            names = tuple(a.name for a in node.names)
            bound = tuple((a.asname, f"{target}.{a.name}") for a in node.names if a.asname)
            found.append(Import(source, target, names, bound, node.lineno, type_checking))
        for child in ast.iter_child_nodes(node):
            visit(child, type_checking)

    visit(tree, False)
    return found


def internal_targets(imp: Import) -> list[str]:
    """The bertwatch modules an import loads: `from pkg import sub` names the submodule, otherwise the module."""
    if imp.target != "bertwatch" and not imp.target.startswith("bertwatch."):
        return []
    subs = [f"{imp.target}.{n}" for n in imp.names if f"{imp.target}.{n}" in MODULES]
    plain = [n for n in imp.names if f"{imp.target}.{n}" not in MODULES]
    targets = subs + ([imp.target] if plain or not imp.names else [])
    return [t for t in targets if t in MODULES]


def subpackage(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and name not in EXEMPT_FROM_LAYERS else None


def import_graph(type_checking: bool = False) -> dict[str, set[str]]:
    """Who imports whom (an import inside a function, a lazy one, counts); ``type_checking``: the imports under
    ``if TYPE_CHECKING:`` count too."""
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for name, path in MODULES.items():
        if name in EXEMPT_FROM_LAYERS:
            continue
        for imp in imports_of(path):
            if imp.type_checking and not type_checking:
                continue
            graph[name].update(t for t in internal_targets(imp) if t != name)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each listed in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return cycles


def functions(tree: ast.AST, prefix: str = ""):
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield f"{prefix}{node.name}", node
            yield from functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, f"{prefix}{node.name}.")


def code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """A function's lines, its docstring not counted (documentation is not what makes a function long)."""
    length = node.end_lineno - node.lineno + 1
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        length -= first.end_lineno - first.lineno + 1
    return length


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


# ---------------------------------------------------------------------------------------------------------------


def test_every_subpackage_has_a_layer():
    unknown = sorted({s for s in map(subpackage, MODULES) if s is not None and s not in LAYERS})
    assert not unknown, f"subpackages without a layer in tests/test_architecture.py LAYERS: {unknown}"


def test_no_import_cycles():
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles between bertwatch modules:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_import_cycles_even_for_type_checking():
    """Not even an import made for the type checker or inside a function closes a loop (``callbacks.judging`` once
    took ``StepResult`` from ``callbacks.watched_run``, which imports it, under ``TYPE_CHECKING``)."""
    cycles = find_cycles(import_graph(type_checking=True))
    assert not cycles, "import cycles, counting TYPE_CHECKING imports:\n" + "\n".join(" <-> ".join(c) for c in cycles)


# ------------------------------------------------------------------------------------------------ the watched run

#: A name that says "a position": a member identified by one is a member identified by an integer.
INDEX_NAME = re.compile(r"(^|_)(index|idx)$")
#: The collections of a run's members; indexing into one, or enumerating it, identifies a member by position.
MEMBER_COLLECTIONS = re.compile(r"(^|_)(members|handles)$")


def member_index_uses(source: str) -> list[str]:
    """Where ``source`` identifies something by an integer position as a run's members were: a variable, argument
    or attribute named as an index (``_index``, ``index``, ``member_idx``), a subscript of a member collection
    (``watched.members[i]``), or ``enumerate`` over one. Each as ``line: what``."""
    found = []

    def collection(node: ast.AST) -> str | None:
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        return name if name is not None and MEMBER_COLLECTIONS.search(name) else None

    tree = ast.parse(source)
    methods = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}  # list.index(x), np.unravel_index(...)
    for node in ast.walk(tree):
        field = {ast.Name: "id", ast.arg: "arg", ast.Attribute: "attr"}.get(type(node))
        named = getattr(node, field) if field and id(node) not in methods else None
        if named is not None and INDEX_NAME.search(named):
            found.append(f"{node.lineno}: the name {named}")
        if isinstance(node, ast.Subscript) and collection(node.value):
            found.append(f"{node.lineno}: {collection(node.value)}[...]")
        if isinstance(node, ast.Call) and called_name(node) == "enumerate" and node.args and collection(node.args[0]):
            found.append(f"{node.lineno}: enumerate({collection(node.args[0])})")
    return found


def test_the_check_for_member_indices_finds_them():
    """The check below finds what the run once did: a callback keeping its index, the run reading a member by it."""
    old = (
        "self._index = self.watched.add(member)\n"
        "member = watched.members[self._index]\n"
        "due = frozenset(i for i, m in enumerate(self.members) if m.active)\n"
        "def leave(self, index: int) -> None: ...\n"
    )
    assert len(member_index_uses(old)) >= 5, member_index_uses(old)
    assert member_index_uses("handle = watched.add(member)\nwatched.leave(handle)\n") == []


def test_callbacks_identify_members_by_handle_never_by_integer_index():
    """A callback holds its ``MemberHandle`` (``callbacks.members``), and the run names members by their handles
    (``StepResult.due``, ``WatchedRun.handle``, ``WatchedRun.leave``): nothing in callbacks/ is named as an index,
    indexes a member collection or enumerates one, and ``WatchedRun.add`` hands back a ``MemberHandle``."""
    bad = [
        f"{relative(p)}:{use}" for p in python_files("bertwatch/callbacks") for use in member_index_uses(p.read_text())
    ]
    assert not bad, "members identified by position in callbacks/ (hold the MemberHandle instead):\n" + "\n".join(bad)
    tree = ast.parse((PACKAGE / "callbacks" / "watched_run.py").read_text())
    (run,) = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "WatchedRun"]
    (add,) = [n for n in run.body if isinstance(n, ast.FunctionDef) and n.name == "add"]
    assert ast.unparse(add.returns) == "MemberHandle", ast.unparse(add.returns)


#: Fields that would carry the Trainer's side of a run into probe/ (its arguments, state, events, writer, trackers).
TRAINER_FIELDS = {"args", "state", "control", "event", "trainer", "writer", "run_dir", "trackers", "world_zero",
                  "resumed", "logging_dir", "callbacks"}  # fmt: skip
TRAINER_TYPES = re.compile(r"Trainer|TrainingArguments|SummaryWriter|Callback")


def test_probe_context_carries_nothing_of_the_trainer():
    """``ProbeContext`` is what the probe pass needs, with no Trainer in sight: none of its fields is the Trainer's
    arguments, state, event keywords, the event writer or the trackers (those live in the watched run's
    ``TrainerSide``), and nothing in bertwatch reads such a field off a context."""
    tree = ast.parse((PACKAGE / "probe" / "probe_context.py").read_text())
    (cls,) = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "ProbeContext"]
    fields = {s.target.id: ast.unparse(s.annotation) for s in cls.body
              if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}  # fmt: skip
    assert "probe" in fields and "encoder_ref" in fields, "ProbeContext's fields were not found"
    bad = sorted(f"{n}: {t}" for n, t in fields.items() if n in TRAINER_FIELDS or TRAINER_TYPES.search(t))
    assert not bad, "Trainer-side fields in ProbeContext (keep them in callbacks.probe_setup.TrainerSide):\n" + (
        "\n".join(bad)
    )
    reads = [
        f"{relative(path)}:{node.lineno} context.{node.attr}"
        for path in package_files()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
        and node.attr in TRAINER_FIELDS
        and isinstance(node.value, ast.Name)
        and node.value.id == "context"
        and "probe" in path.parts  # fmt: skip
    ]
    assert not reads, "probe/ reads a Trainer-side field off its context:\n" + "\n".join(reads)


def test_imports_run_downward():
    bad = []
    for name, path in MODULES.items():
        if name in EXEMPT_FROM_LAYERS:
            continue
        own = subpackage(name)
        for imp in imports_of(path):
            if imp.type_checking:
                continue
            for target in internal_targets(imp):
                other = subpackage(target)
                if other is None or other == own:
                    continue
                if LAYERS[other] >= LAYERS[own]:
                    bad.append(
                        f"{relative(path)}:{imp.line} {name} ({own}, layer {LAYERS[own]}) imports {target} "
                        f"({other}, layer {LAYERS[other]})"
                    )
    assert not bad, "imports that go up or sideways between subpackages:\n" + "\n".join(bad)


def test_modules_are_short():
    long = [
        f"{relative(p)}: {n} lines"
        for p in package_files()
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by job):\n" + "\n".join(long)


def test_long_functions_say_why():
    bad = []
    for path in package_files():
        tree = ast.parse(path.read_text())
        for qualname, node in functions(tree):
            length = code_lines(node)
            if length > MAX_FUNCTION_LINES and LONG_REASON not in (ast.get_docstring(node) or ""):
                bad.append(f"{relative(path)}:{node.lineno} {qualname}: {length} lines")
    assert not bad, (
        f"functions over {MAX_FUNCTION_LINES} lines without '{LONG_REASON} ...' in their docstring "
        "(split them into named steps, or give the reason):\n" + "\n".join(bad)
    )


#: ``getattr(x, name, default)`` calls allowed in bertwatch/: each reads an attribute a real object may lack.
MAX_DEFAULT_GETATTRS = 40
_TOOL_COMMENTS = ("# noqa", "# type:", "# pragma")  # comments for tools, not for readers


def _comment_lines(source: str) -> set[int]:
    lines = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT and not token.string.startswith(_TOOL_COMMENTS):
            lines.add(token.start[0])
    return lines


def test_getattr_with_a_default_is_rare_and_says_which_object_lacks_the_attribute():
    """A default hides a misspelt or renamed attribute: bertwatch reads an attribute directly where every object it
    gets has it (a transformers config answers ``num_attention_heads`` for every family), asks one function where
    families spell it differently (``heads.pruned_modeling.head_counts``), and keeps ``getattr(x, name, default)``
    only where a real object may lack the attribute, with a comment on its line or the line above naming it."""
    calls, bare = [], []
    for path in package_files():
        source = path.read_text()
        comments = _comment_lines(source)
        for node in ast.walk(ast.parse(source)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"):
                continue
            if len(node.args) != 3:
                continue
            where = f"{relative(path)}:{node.lineno}"
            calls.append(where)
            if not comments & set(range(node.lineno - 1, node.end_lineno + 1)):
                bare.append(where)
    assert len(calls) <= MAX_DEFAULT_GETATTRS, (
        f"{len(calls)} getattr(x, name, default) calls in bertwatch/, over {MAX_DEFAULT_GETATTRS}: read the attribute "
        "directly where every object has it, or ask the one function that answers the question:\n" + "\n".join(calls)
    )
    assert not bare, (
        "getattr(x, name, default) without a comment (on its line or the line above) saying which real object may "
        "lack the attribute:\n" + "\n".join(bare)
    )


def test_only_the_command_line_reads_argv():
    bad = []
    for name, path in MODULES.items():
        if subpackage(name) == "cli":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "argv":
                bad.append(f"{relative(path)}:{node.lineno} reads .argv")
        for imp in imports_of(path):
            if imp.target == "argparse" or (imp.target == "sys" and "argv" in imp.names):
                bad.append(f"{relative(path)}:{imp.line} imports {imp.target} {list(imp.names) or ''}".rstrip())
    assert not bad, "argv / argparse outside bertwatch/cli/:\n" + "\n".join(bad)


def is_module_path(dotted: str) -> bool:
    path = ROOT / Path(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def imported_modules(path: Path) -> dict[str, str]:
    """Local names bound to project modules (bertwatch, tests, benchmarks) by the imports of one file."""
    bound = {}
    for imp in imports_of(path):
        if imp.target.split(".")[0] not in PROJECT_ROOTS:
            continue
        for name in imp.names or (imp.target.split(".")[0],):
            dotted = f"{imp.target}.{name}" if imp.names else name
            if is_module_path(dotted):
                bound[name] = dotted
        for alias_name, dotted in imp.aliases:
            if is_module_path(dotted):
                bound[alias_name] = dotted
    return bound


PROJECT_ROOTS = ("bertwatch", "tests", "benchmarks", "_common")


def test_no_private_names_imported_across_modules():
    bad = []
    for path in python_files("bertwatch", "tests", "benchmarks"):
        for imp in imports_of(path):
            if imp.target.split(".")[0] not in PROJECT_ROOTS:
                continue
            for n in imp.names:
                if is_private(n) and not is_module_path(f"{imp.target}.{n}"):
                    bad.append(f"{relative(path)}:{imp.line} from {imp.target} import {n}")
        modules = imported_modules(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and is_private(node.attr) and isinstance(node.value, ast.Name):
                owner = modules.get(node.value.id)
                if owner is not None and not is_module_path(f"{owner}.{node.attr}"):
                    bad.append(f"{relative(path)}:{node.lineno} {node.value.id}.{node.attr} ({owner})")
    assert not bad, "private names used from another module (make them public where defined):\n" + "\n".join(bad)


def test_no_stack_walking():
    bad = []
    for path in package_files():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and (
                node.attr in ("_getframe", "stack", "currentframe", "getouterframes")
            ):
                owner = node.value.id if isinstance(node.value, ast.Name) else ""
                if owner in ("sys", "inspect"):
                    bad.append(f"{relative(path)}:{node.lineno} {owner}.{node.attr}")
        for imp in imports_of(path):
            taken = {"_getframe"} & set(imp.names) if imp.target == "sys" else set()
            taken |= {"stack", "currentframe", "getouterframes"} & set(imp.names) if imp.target == "inspect" else set()
            bad += [f"{relative(path)}:{imp.line} from {imp.target} import {n}" for n in sorted(taken)]
    assert not bad, "call-stack walking in bertwatch/ (pass what is needed as arguments):\n" + "\n".join(bad)


def callback_modules() -> list[Path]:
    """The modules of bertwatch/callbacks that define a Trainer callback (a class with ``TrainerCallback`` or a
    ``...Callback`` among its bases)."""
    found = []
    for path in sorted((PACKAGE / "callbacks").glob("*.py")):
        classes = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)]
        bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for c in classes for b in c.bases}
        if any(name.endswith("Callback") for name in bases):
            found.append(path)
    return found


def test_no_callback_judges():
    """The run judges the alerts and the verdict once per probe step (callbacks/judging.py); a callback only reads
    what was judged."""
    modules = callback_modules()
    assert any(p.name == "watch.py" for p in modules), [p.name for p in modules]
    bad = []
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
                if name.startswith("judge") or name.startswith("_judge"):
                    bad.append(f"{relative(path)}:{node.lineno} {name}()")
    assert not bad, "callbacks that judge (leave it to the run, callbacks/judging.py):\n" + "\n".join(bad)


def no_torch_after(code: str) -> None:
    check = f"{code}\nimport sys\nheavy = sorted(m for m in ('torch', 'transformers') if m in sys.modules)\n"
    check += "assert not heavy, heavy\n"
    done = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"`{code}` imports torch or transformers:\n{done.stderr[-2000:]}"


TORCH_FREE = ("core", "tb", "report")  # subpackages that must load without torch


def test_import_bertwatch_tb_and_report_do_not_import_torch():
    modules = ["bertwatch"] + sorted(m for m in MODULES if subpackage(m) in TORCH_FREE)
    no_torch_after("import " + ", ".join(modules))


def test_bertwatch_report_command_does_not_import_torch(tmp_path):
    """`bertwatch report DIR` end to end on an ablation.json and a run's head grids, without loading torch."""
    no_torch_after(
        "import numpy as np\n"
        "from bertwatch.cli import main\n"
        "from bertwatch.report.html import write_outputs\n"
        "from bertwatch.report.result import AblationResult\n"
        "from bertwatch.tb.writer.summary import SummaryWriter\n"
        f"root = {str(tmp_path)!r}\n"
        "cells = np.full((2, 3, 5), 0.5)\n"
        "write_outputs(AblationResult('sst2', 'uniform', 'accuracy', 10, 0.5, cells, cells[:, 0]), root + '/abl')\n"
        "with SummaryWriter(root + '/run') as w:\n"
        "    for step in (0, 5):\n"
        "        w.add_head_grids({'cls_mass': np.full((2, 3), step / 10)}, step)\n"
        "assert main(['report', root, '--out', root + '/report.html']) == 0\n"
    )


#: private methods of torch objects that bertwatch once reached for; a generic check cannot tell their owner
PRIVATE_TORCH_METHODS = {"_get_file_writer"}


def attribute_chain(node: ast.Attribute) -> list[str]:
    parts = [node.attr]
    while isinstance(node.value, ast.Attribute):
        node = node.value
        parts.append(node.attr)
    if isinstance(node.value, ast.Name):
        parts.append(node.value.id)
    return parts[::-1]


def test_no_private_torch_api():
    bad = []
    for path in package_files():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                chain = attribute_chain(node)
                if (
                    chain[0] == "torch" and any(is_private(p) for p in chain[1:])
                ) or node.attr in PRIVATE_TORCH_METHODS:
                    bad.append(f"{relative(path)}:{node.lineno} {'.'.join(chain)}")
        for imp in imports_of(path):
            if imp.target.split(".")[0] != "torch":
                continue
            names = imp.target.split(".")[1:] + list(imp.names)
            bad += [f"{relative(path)}:{imp.line} import of {imp.target} {n}" for n in names if is_private(n)]
    assert not bad, "private torch API in bertwatch/ (use a public route):\n" + "\n".join(sorted(set(bad)))


def top_level_names(path: Path) -> set[str]:
    """Names a module defines or imports at its top level (what `from module import name` can take)."""
    names: set[str] = set()
    lazy: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
            if any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in targets) and isinstance(node.value, ast.Dict):
                names.update(k.value for k in node.value.keys if isinstance(k, ast.Constant))  # loaded on first use
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.If) and is_type_checking(node.test):
            lazy.update(a.asname or a.name for n in node.body if isinstance(n, ast.ImportFrom) for a in n.names)
    return names | lazy if "__getattr__" in names else names  # a module __getattr__ serves the lazy names


def test_documented_imports_exist():
    """Every `from bertwatch.x import a, b` in README.md and docs/*.md names a module and names that exist."""
    bad = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            stripped = line.strip()
            if not stripped.startswith("from bertwatch") or " import " not in stripped:
                continue
            module, _, names = stripped.partition(" import ")
            module = module.removeprefix("from ").strip()
            names = names.split("#")[0].strip().strip("()")
            path = MODULES.get(module)
            if path is None:
                bad.append(f"{relative(doc)}:{number} no module {module}")
                continue
            defined = top_level_names(path)
            for name in (n.strip().split(" as ")[0] for n in names.split(",") if n.strip()):
                if name not in defined and f"{module}.{name}" not in MODULES:
                    bad.append(f"{relative(doc)}:{number} {module} has no {name}")
    assert not bad, "imports shown in the docs that fail:\n" + "\n".join(bad)


def tree_names() -> set[str]:
    """Paths relative to ``bertwatch/`` that the tree of docs/architecture.md names: its files, and for each folder
    line (``core/``, or ``views/`` nested deeper under ``tb/``) the folder itself and, where it is a package, its
    ``__init__.py``. A line's names belong to the nearest folder line above it with less indentation."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("## The tree", 1)[1].split("```", 2)[1]
    named: set[str] = set()
    folders: list[tuple[int, str]] = []  # (indentation, path) of the folder lines the current line is inside
    for line in block.splitlines()[1:]:
        indent = len(line) - len(line.lstrip(" "))
        if indent == 0:  # the package folder itself
            continue
        while folders and folders[-1][0] >= indent:
            folders.pop()
        folder = folders[-1][1] if folders else ""
        for position, token in enumerate(line.split()):
            name = token.rstrip(",")
            if not re.fullmatch(r"\w+(\.py|/)", name):
                break
            path = f"{folder}{name}"
            named.add(path)
            if name.endswith("/") and position == 0:
                folders.append((indent, path))
                if (PACKAGE / path / "__init__.py").exists():
                    named.add(f"{path}__init__.py")
    return named


#: File names several subpackages may each have: the package files, and each subpackage's frozen settings value.
SHARED_FILE_NAMES = {"__init__.py", "__main__.py", "settings.py"}


def test_no_two_modules_share_a_name():
    """One meaning per word: a module name names one thing (``report/syntax_section.py`` beside ``linguistics/``,
    ``heads/task_heads.py`` beside ``ablation/task_types.py``)."""
    seen: dict[str, list[str]] = {}
    for path in package_files():
        seen.setdefault(path.name, []).append(relative(path))
    shared = {name: paths for name, paths in seen.items() if len(paths) > 1 and name not in SHARED_FILE_NAMES}
    assert not shared, "modules with the same name in several subpackages (name each for its job):\n" + "\n".join(
        f"{name}: {', '.join(paths)}" for name, paths in sorted(shared.items())
    )


def test_no_module_is_named_as_a_subpackage():
    """A module is not named as a subpackage (``callbacks/ablate_on_end.py``, not ``callbacks/ablation.py`` beside
    ``ablation/``): ``bertwatch.callbacks.ablation`` and ``bertwatch.ablation`` would name two things. A nested
    subpackage's name (``tb/views/runs/``) is taken too. The modules of ``cli/`` are named by the command they run
    (``cli/report.py``: ``bertwatch report``)."""
    subpackages = {path.parent.name for path in PACKAGE.rglob("*/__init__.py")}  # nested ones too (tb/views/runs/)
    commands = PACKAGE / "cli"
    clashes = [relative(p) for p in package_files() if p.stem in subpackages and p.parent != commands]
    assert not clashes, "modules named as a subpackage (name each for its job):\n" + "\n".join(clashes)


def test_architecture_names_every_module():
    named = tree_names()
    files = {p.relative_to(PACKAGE).as_posix() for p in package_files()}
    unnamed = sorted(files - named)
    assert not unnamed, "modules docs/architecture.md's tree does not name (add each with its job):\n" + "\n".join(
        unnamed
    )
    missing = sorted(n for n in named if not (PACKAGE / n).exists())
    assert not missing, "the tree of docs/architecture.md names modules that do not exist:\n" + "\n".join(missing)


# ------------------------------------------------------------------------------------------------ a test per module

#: The share of modules with a test file of their own, ``tests/<subpackage>/test_<module>.py`` (``_x.py``:
#: ``test_x.py``), at least.
MODULE_TEST_SHARE = 0.70
#: The modules without one, each with where its behaviour is tested instead (tests/README.md: a test that drives
#: several layers goes with the highest one). A module that gets its own test file leaves this list.
WITHOUT_OWN_TEST = {
    "ablation/estimate.py": "the plan line's timing and step counts: tests/ablation/test_resolution_sweep.py; the "
    "budget rule and the CPU's examples: tests/ablation/test_budget.py",
    "report/colour_grid.py": "the Δ-per-head cells: tests/report/test_html.py and the colour browser test "
    "(tests/tb/test_colour_browser.py, against the plugin)",
    "report/run_report.py": "the one report: tests/cli/test_report.py, tests/tb/test_colour_browser.py and "
    "ablate_on_end in tests/callbacks/test_callbacks_training.py",
    "tb/views/ablation/ablation_route.py": "the /ablation route's body: tests/tb/test_plugin.py (the route, its "
    "curves and answer)",
    "ablation/configs.py": "the head masks of every sweep: tests/ablation/test_sweep.py and test_runner.py",
    "ablation/evaluate.py": "resumable, split evaluation: tests/ablation/test_sweep.py (one rank and two)",
    "ablation/gain.py": "what a pruned model buys: tests/cli/test_prune.py end to end",
    "ablation/inputs.py": "batches and shards of the sweep: tests/ablation/test_sweep.py and test_runner.py",
    "ablation/orders.py": "the importance and iterative orders against a plain loop: tests/ablation/test_pruning.py",
    "ablation/scoring.py": "every task's metric in the sweep, against a plain evaluation: tests/ablation/test_task_types.py",
    "ablation/store.py": "the partial.jsonl resume: tests/ablation/test_sweep.py; the split: tests/callbacks/test_fsdp.py",
    "callbacks/attach.py": "watch() and watching_trainers(): tests/options/test_settings.py, tests/cli/test_run.py",
    "probe/probe_context.py": "what a run gives the probe pass: tests/probe/test_probe_pass.py",
    "probe/records.py": "the Rider protocol and the riders' values: tests/probe/test_probe_pass.py (a rider on a pass), "
    "tests/callbacks/test_riders.py, test_word_classes.py",
    "callbacks/tracking.py": "the layer means sent to trackers: tests/callbacks/test_watch.py, test_outlier_pass.py",
    "core/removable.py": "the 'N% of heads at δ' answer: tests/ablation/test_pruning.py",
    "core/verdict_settings.py": "the verdict's thresholds and their checks: tests/core/test_verdict.py",
    "core/rules.py": "the behaviour labels and pattern classes: tests/heads/maps/test_patterns.py, "
    "tests/tb/test_plugin.py",
    "heads/adapters.py": "DeBERTa and MPNet capture against eager maps: tests/heads/test_capture_support.py",
    "heads/intervention.py": "uniform and zero heads inside capture: tests/heads/test_capture.py, ablation tests",
    "heads/mixing/mixing_model.py": "the model side of context mixing: tests/heads/mixing/test_mixing_scores.py",
    "heads/pruned_modeling.py": "the pruned models' own code: tests/ablation/test_physical.py (a fresh process too)",
    "heads/maps/row_reductions.py": "the row reductions behind every statistic: tests/heads/maps/test_stats.py",
    "heads/sharding.py": "sharded weights under FSDP2: tests/callbacks/test_fsdp.py",
    "linguistics/scan.py": "the one pass of probe-syntax: tests/cli/test_probe_syntax.py, "
    "tests/linguistics/test_linguistics_invariance.py",
    "report/alerts_section.py": "the report's alerts: tests/core/test_outlier_alert.py and its docstring example",
    "report/changes.py": "what changed in the heads: tests/report/test_summary_section.py against float64 reads",
    "report/figures.py": "the report's figures: tests/report/test_summary_section.py, test_training_section.py",
    "report/gain_section.py": "the pruned model's section: tests/cli/test_prune.py",
    "report/pruning_section.py": "the pruning answer and curves: tests/ablation/test_pruning.py",
    "report/syntax_section.py": "the linguistics section: tests/cli/test_probe_syntax.py, tests/cli/test_report.py",
    "tb/views/ablation/ablation_summary.py": "the ablation tables in TensorBoard: tests/tb/writer/test_summary.py, "
    "tests/tb/test_plugin.py",
    "tb/views/heads/layer_outliers.py": "the /outliers route: tests/callbacks/test_outlier_pass.py, "
    "tests/tb/views/heads/test_outliers_browser.py",
    "tb/views/heads/run_verdict.py": "the /verdict route: tests/tb/views/heads/test_verdict_route.py",
    "report/sweep_table.py": "the sweep's table, read from a folder of runs: tests/cli/test_sweep_runs.py",
}


def own_test(path: Path) -> Path:
    """Where the tests of ``bertwatch/<pkg>/x.py`` (or ``_x.py``) live: ``tests/<pkg>/test_x.py``, nested folders
    mirrored (``bertwatch/tb/views/runs/runs_route.py``: ``tests/tb/views/runs/test_runs_route.py``)."""
    rel = path.relative_to(PACKAGE)
    return ROOT / "tests" / rel.parent / f"test_{path.stem.lstrip('_')}.py"


def test_most_modules_have_their_own_test_file_and_the_others_say_where_they_are_tested():
    modules = [p for p in package_files() if p.name not in ("__init__.py", "__main__.py")]
    without = {p.relative_to(PACKAGE).as_posix() for p in modules if not own_test(p).exists()}
    unlisted = sorted(without - set(WITHOUT_OWN_TEST))
    assert not unlisted, "modules without tests/<pkg>/test_<module>.py (write one, or list it with a reason):\n" + (
        "\n".join(unlisted)
    )
    stale = sorted(set(WITHOUT_OWN_TEST) - without)
    assert not stale, "listed as without a test file of their own, but they have one (or are gone):\n" + "\n".join(
        stale
    )
    share = 1 - len(without) / len(modules)
    assert share >= MODULE_TEST_SHARE, f"{len(modules) - len(without)} of {len(modules)} modules have a test file"


# ------------------------------------------------------------------------------------------------ one schema


def called_name(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def option_makers(tree: ast.Module) -> set[str]:
    """``option``, ``option_of`` (another value's option, declared there) and this module's functions that return
    ``option(...)`` (``_threshold``, ``_on_by_default``)."""
    makers = {"option", "option_of"}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name not in makers:
            returns = [n.value for n in ast.walk(node) if isinstance(n, ast.Return) and isinstance(n.value, ast.Call)]
            if any(called_name(r) == "option" for r in returns):
                makers.add(node.name)
    return makers


#: Where an option's name and flags must be unique: the commands (or value) whose options a settings value holds.
#: Every value not named here is one of ``bertwatch run``'s (``WatchSettings`` and its nested values). A
#: ``WordClassProbe`` is the value of ``word_classes=``: its fields are no flags and no keywords of a callback.
#: ``PruneShare`` (``--fraction``) is one value that two commands share.
NAMESPACES = {
    "AblationSettings": ("bertwatch ablate",),
    "ShipOptions": ("bertwatch ship",),
    "GainOptions": ("bertwatch prune",),
    "PruneShare": ("bertwatch prune", "bertwatch ship"),
    "WordClassProbe": ("word_classes=",),
}
#: The command-line module of each namespace: it types none of its settings values' flags by hand.
COMMAND_MODULES = {
    "bertwatch ablate": "bertwatch/cli/ablate.py",
    "bertwatch ship": "bertwatch/cli/ship.py",
    "bertwatch prune": "bertwatch/cli/prune.py",
    "bertwatch run": "bertwatch/cli/run.py",
}


@dataclass(frozen=True)
class Declared:
    where: str  # "bertwatch/core/alerts.py:AlertSettings"
    field: str
    flags: tuple[str, ...]  # the flag names (string constants "--...") in its declaration
    made_by_option: bool
    help: str = ""  # the help text's source (option()'s second argument); "" for other makers and plain fields
    refers: bool = False  # made by option_of: another value's option, declared there

    @property
    def namespaces(self) -> tuple[str, ...]:
        return NAMESPACES.get(self.where.split(":")[1], ("bertwatch run",))


def built_by_checked(cls: ast.ClassDef) -> bool:
    """``@dataclass(..., init=False)``: the class is built by ``Checked.__init__`` (names checked, then values)."""
    return any(isinstance(d, ast.Call) and any(k.arg == "init" and isinstance(k.value, ast.Constant)
               and k.value.value is False for k in d.keywords) for d in cls.decorator_list)  # fmt: skip


def settings_fields() -> list[Declared]:
    """Every field of every settings value (a class deriving from ``Checked``) and every field made with
    ``option()`` anywhere in bertwatch/, read from the source."""
    found = []
    for path in package_files():
        tree = ast.parse(path.read_text())
        makers = option_makers(tree)
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            checked = any(isinstance(b, ast.Name) and b.id == "Checked" for b in cls.bases)
            if checked and not built_by_checked(cls):
                found.append(Declared(f"{relative(path)}:{cls.name}", "__init__", (), False))
            for stmt in cls.body:
                if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                    continue
                made = isinstance(stmt.value, ast.Call) and called_name(stmt.value) in makers
                if made or checked:
                    flags = tuple(n.value for n in ast.walk(stmt.value or stmt) if isinstance(n, ast.Constant)
                                  and isinstance(n.value, str) and n.value.startswith("--"))  # fmt: skip
                    refers = made and called_name(stmt.value) == "option_of"
                    args = stmt.value.args if made else []
                    direct = made and called_name(stmt.value) == "option" and len(args) > 1
                    text = ast.unparse(args[1]) if direct else ""
                    found.append(Declared(f"{relative(path)}:{cls.name}", stmt.target.id, flags, made, text, refers))
    return found


def test_every_option_is_declared_once_with_option():
    """One schema: every field of a settings value is made by ``option()`` (its type, default, help, check and flags
    in one place: no second list of the same options, such as a probe part re-declared by hand), or by
    ``option_of()`` where a value holds another value's option; every settings value is built by ``Checked``
    (``@dataclass(..., init=False)``; listed as ``.__init__`` otherwise) and every public class named for settings or
    options is one. Within a command (``NAMESPACES``) no option name is declared in two settings values and no flag
    twice; across commands no two options share a help text (one would be the other's copy)."""
    fields = settings_fields()
    values = {d.where.split(":")[1] for d in fields}
    assert {"WatchSettings", *NAMESPACES} <= values, values
    assert len(values) >= 10, "the settings values were not found"
    unchecked = []
    for path in package_files():
        for cls in (n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)):
            named = cls.name.endswith(("Settings", "Options")) and not cls.name.startswith("_")
            if named and not any(isinstance(b, ast.Name) and b.id == "Checked" for b in cls.bases):
                unchecked.append(f"{relative(path)}:{cls.name}")
    assert not unchecked, "settings values not built on Checked (declare their fields with option()):\n" + "\n".join(
        unchecked
    )
    plain = [f"{d.where}.{d.field}" for d in fields if not d.made_by_option]
    assert not plain, (
        "settings fields not declared with option(), or values not built by Checked (`.__init__`: add init=False):\n"
        + "\n".join(plain)
    )
    owners: dict[tuple[str, str], list[str]] = {}
    for d in fields:
        if not d.refers:
            for space in d.namespaces:
                owners.setdefault((space, d.field), []).append(d.where)
    twice = sorted(f"{name} ({space}): {', '.join(where)}" for (space, name), where in owners.items() if len(where) > 1)
    assert not twice, "options declared in two places (one is the option, the other a copy):\n" + "\n".join(twice)
    for space in {space for d in fields for space in d.namespaces}:
        flags = [flag for d in fields if space in d.namespaces for flag in d.flags]
        assert len(flags) == len(set(flags)), (space, sorted({f for f in flags if flags.count(f) > 1}))
    helps: dict[str, list[str]] = {}
    for d in fields:
        if d.help:
            helps.setdefault(d.help, []).append(f"{d.where}.{d.field}")
    copied = sorted(" = ".join(where) for where in helps.values() if len(where) > 1)
    assert not copied, "one help text in two declarations (declare it once; option_of takes another's):\n" + "\n".join(
        copied
    )


def test_commands_build_their_settings_flags_from_the_declarations():
    """``bertwatch run``, ``ablate``, ``ship`` and ``prune`` add their settings values' flags with
    ``cli.argv.add_options``: no ``add_argument`` in their module names a flag their settings declare (its default
    and help would be typed a second time)."""
    fields = settings_fields()
    typed = []
    for space, module in COMMAND_MODULES.items():
        declared = {flag for d in fields if space in d.namespaces for flag in d.flags}
        for node in ast.walk(ast.parse((ROOT / module).read_text())):
            if isinstance(node, ast.Call) and called_name(node) == "add_argument":
                names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                typed += [f"{module}:{node.lineno} {name}" for name in names if name in declared]
    assert not typed, "flags typed by hand that a settings value declares (use add_options):\n" + "\n".join(typed)


def test_no_help_text_outside_option():
    """An option's help is written in its ``option()`` call only: no module-level table in options/, core/ or a
    module that declares options named for help, or keyed by option names with sentences for values."""
    names = {d.field for d in settings_fields()}
    bad = []
    declaring = {ROOT / d.where.split(":")[0] for d in settings_fields()}
    for path in sorted({*python_files("bertwatch/options", "bertwatch/core"), *declaring}):
        for node in ast.parse(path.read_text()).body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            named = [t.id for t in targets if isinstance(t, ast.Name)]
            value = getattr(node, "value", None)
            if any("HELP" in n.upper() for n in named):
                bad.append(f"{relative(path)}:{node.lineno} {named[0]}")
            elif isinstance(value, ast.Dict):
                keyed = [k.value for k, v in zip(value.keys, value.values) if isinstance(k, ast.Constant)
                         and k.value in names and isinstance(v, ast.Constant) and " " in str(v.value)]  # fmt: skip
                if keyed:
                    bad.append(f"{relative(path)}:{node.lineno} {named[0] if named else ''} ({', '.join(keyed)})")
    assert not bad, "help texts outside option() (move each into its option's declaration):\n" + "\n".join(bad)
