"""Static audit of a submission's answer cells, before anything runs (Python ``ast``).

Used by: :mod:`memlab.autograde.batch.grade_class` (every submitted notebook is audited in the pre-check;
a violating answer cell is replaced by its released stub, so its tests score 0, and the
submission is listed for review), tests/grading/test_audit.py, tests/grading/hostile/.

Why a hand-written checker and not RestrictedPython: RestrictedPython compiles code for a
*restricted execution* (guarded ``_getattr_``/``_write_`` hooks in a globals dict it controls).
The learner's code here runs unchanged in a normal IPython kernel (inside the OS sandbox,
:mod:`memlab.autograde.security.bwrap`), so its execution model does not fit, and its policy is generic
(no underscore names, no ``exec``) with nothing per exercise: it cannot say "01's
``count_param_bytes`` must not call ``memlab.param_bytes``", it does not follow import aliases
to their origin, and it reports compile errors, not "cell, line, rule" for a reviewer. What we
need is a *policy report* over ~30 lines of learner code per cell: a visitor over the standard
library's ``ast`` does that in a few hundred lines with no dependency, and every rule has a
test. The audit is one of several layers: it refuses what has no business in an answer; the
sandbox confines what runs; hidden tests check behaviour.

Rules (each violation names cell, line and rule):

* ``import``: only modules of the policy's ``allowed_imports`` (torch, math, numpy, memlab, ...);
  ``os``, ``sys`` and ``types`` only for the attributes :data:`RESTRICTED_ATTRS` lists
  (``os.path``, ``sys.stderr``, ``types.SimpleNamespace``...); no relative or ``*`` imports
  of restricted modules.
* ``process-or-hook API``: ctypes, gc, inspect, signal, subprocess, threading, multiprocessing,
  importlib and import machinery, IPython's shell/kernel/session (``get_ipython``, ``In``,
  ``Out``), ``sys.settrace``/``setprofile``/``meta_path``/``modules``..., ``os.kill``/``_exit``...
* ``dynamic code``: ``exec``, ``eval``, ``compile``, ``__import__``, ``globals``, ``locals``,
  ``vars``, ``breakpoint``.
* ``introspection``: dunder attributes outside a short allow list (``__code__``,
  ``__globals__``, ``__dict__``, ``__subclasses__``, ``__builtins__``...) and frame/traceback
  attributes (``f_back``, ``f_globals``, ``tb_frame``, ``gi_frame``...).
* ``dynamic attribute``: ``getattr``/``setattr``/``delattr`` on a module or on something
  imported from one.
* ``monkeypatch``: assigning or deleting an attribute of a module or of anything imported
  (``torch.allclose = ...``, ``torch.Tensor.__int__ = ...``, ``ml.measure_peak = ...``).
* ``private API``: ``_private`` names of torch or memlab (unless explicitly allowed).
* ``builtins tampering``: binding a builtin's name at the top of a cell
  (``def isinstance(...)``) or ``import builtins``.
* ``rebinds the notebook's name``: binding at the top of a cell a name the notebook's locked
  cells define (``ml = ...``, ``torch = ...``, a helper the tests call).
* ``forbidden helper``: per exercise (:data:`POLICIES`), the memlab functions that compute its
  own answer. Matched by *origin and name*, not identity: every reference (not only calls) to
  any memlab attribute with that name, through any import alias or module path, and the name
  in a string literal (``getattr(ml, "param_bytes")``), so a ``FunctionType`` clone made from
  it is caught at the reference.

Explicit allowances: ``Policy.allow`` names dotted origins a cell may use in spite of a rule
(for example ``torch.utils._python_dispatch.TorchDispatchMode``, a private module path of a
public class).
"""
from __future__ import annotations

import ast
import builtins
import copy
import re
import sys
import types
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

from memlab import MODULES as _SHORT_NAMES
from memlab.grading.assignments import ASSIGNMENTS, Assignment

__all__ = ["Violation", "Policy", "POLICIES", "policy_for", "audit_source", "audit_notebook",
           "apply_audit", "REVIEW_PREFIX"]

REVIEW_PREFIX = "NEEDS MANUAL REVIEW:"

DEFAULT_IMPORTS = frozenset({
    "torch", "math", "cmath", "functools", "itertools", "collections", "dataclasses", "typing",
    "numbers", "operator", "copy", "contextlib", "warnings", "time", "random", "statistics",
    "numpy", "memlab", "re", "string", "textwrap", "json", "decimal", "fractions", "enum", "abc",
    "heapq", "bisect", "types", "IPython.display", "ipywidgets", "matplotlib", "os", "sys",
    "datetime", "pprint", "timeit",
})
# Modules a cell may import but use only through these attributes.
RESTRICTED_ATTRS: Mapping[str, frozenset[str]] = {
    "os": frozenset({"path", "urandom", "cpu_count", "sep", "linesep", "getcwd", "curdir"}),
    "sys": frozenset({"stdout", "stderr", "getsizeof", "version", "version_info", "maxsize",
                      "float_info", "platform", "byteorder", "hexversion", "int_info"}),
    "types": frozenset({"SimpleNamespace", "MappingProxyType"}),
    # timeit.timeit("code") compiles a string: only the clock (time it with time.perf_counter)
    "timeit": frozenset({"default_timer"}),
    # the names annotations use; not get_type_hints/ForwardRef, which EVALUATE a string
    # annotation in the cell's globals (`def f(a: "sys.modules")` would hand out sys.modules)
    "typing": frozenset({
        "Any", "Optional", "Union", "List", "Dict", "Tuple", "Set", "FrozenSet", "Callable",
        "Iterable", "Iterator", "Sequence", "Mapping", "MutableMapping", "MutableSequence",
        "NamedTuple", "TypedDict", "Literal", "TypeVar", "Generic", "Protocol", "cast",
        "overload", "Final", "ClassVar", "Type", "Generator", "Hashable", "Sized", "Collection",
        "Deque", "DefaultDict", "Counter", "OrderedDict", "Annotated", "NoReturn",
        "TYPE_CHECKING", "Self", "Never", "SupportsFloat", "SupportsInt", "SupportsIndex"}),
    # not singledispatch, whose register() evaluates annotations the same way
    "functools": frozenset({"partial", "partialmethod", "reduce", "lru_cache", "cache",
                            "cached_property", "wraps", "update_wrapper", "cmp_to_key",
                            "total_ordering"}),
}
# A module's attribute that is another module by design (os.path is posixpath or ntpath).
KNOWN_MODULE_ALIASES = frozenset({"os.path"})
# Never, even when a policy lists them in allowed_imports by mistake.
DENIED_MODULES = frozenset({
    "ctypes", "gc", "inspect", "signal", "subprocess", "threading", "_thread", "multiprocessing",
    "concurrent", "asyncio", "importlib", "imp", "pkgutil", "runpy", "zipimport", "builtins",
    "__builtin__", "IPython", "ipykernel", "jupyter_client", "zmq", "socket", "sqlite3",
    "marshal", "pickle", "code", "codeop", "dis", "ast", "atexit", "faulthandler", "sysconfig",
    "site", "resource", "tracemalloc", "shutil", "pathlib", "tempfile", "nbformat", "nbgrader",
    "nbclient", "traitlets", "pty", "fcntl", "mmap", "posix", "sys.monitoring",
    # memlab's own: the grader (both sides) and the tools; every short name of memlab.MODULES
    # resolves to its module first (canonical()), so `memlab.instructor`, `memlab.lab` and
    # `from memlab import hostedcheck` are these modules too
    "memlab.grading", "memlab.autograde", "memlab.tools",
    "torch.multiprocessing", "torch.distributed",
    # what changes what torch's ops do for everyone (kernels, dispatch and function modes), what
    # loads or compiles code (pickles, extensions, hub, packages), and attribute lookup by string
    "torch.library", "torch.overrides", "torch.utils._python_dispatch", "torch.utils.cpp_extension",
    "torch.hub", "torch.package", "torch.serialization", "torch.ops.load_library",
    "torch.classes",
    "torch.jit.load", "torch.utils.weak", "numpy.ctypeslib", "numpy.lib.format",
    "operator.attrgetter", "operator.methodcaller", "string.Formatter", "weakref",
})
DYNAMIC_CODE = frozenset({"exec", "eval", "compile", "__import__", "globals", "locals", "vars",
                          "breakpoint", "exit", "quit", "help", "copyright", "credits", "license"})
DYNAMIC_ATTR = frozenset({"getattr", "setattr", "delattr"})
IPYTHON_NAMES = frozenset({"get_ipython", "In", "Out", "_ih", "_oh", "_dh", "_i", "_ii", "_iii",
                           "__IPYTHON__", "display_pub"})
# Dunder methods a learner's own class may define: construction, calling, context managers,
# containers and printing. Comparison, arithmetic and conversion (``__eq__``, ``__float__``,
# ``__index__``...) are not among them: an answer that is an object of one's own class with
# those can compare equal to every expected value. ``__del__``, ``__getattr__``, ``__reduce__``
# run code when the grader touches or frees the object.
DEFINABLE_DUNDERS = frozenset({
    "__init__", "__call__", "__repr__", "__str__", "__enter__", "__exit__", "__iter__",
    "__next__", "__len__", "__getitem__", "__setitem__", "__contains__", "__post_init__",
})
# Public names with an underscore: namedtuple's API.
PUBLIC_UNDERSCORE = frozenset({"_asdict", "_replace", "_fields", "_make", "_field_defaults"})
ALLOWED_DUNDERS = frozenset({
    "__init__", "__name__", "__qualname__", "__doc__", "__len__", "__call__", "__enter__",
    "__exit__", "__iter__", "__next__", "__getitem__", "__setitem__", "__contains__", "__repr__",
    "__str__", "__class__", "__post_init__", "__version__", "__float__", "__index__", "__add__",
    "__mul__", "__hash__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__main__",
})
FRAME_ATTRS = frozenset({"f_back", "f_globals", "f_locals", "f_builtins", "f_code", "f_trace",
                         "tb_frame", "tb_next", "gi_frame", "gi_code", "cr_frame", "cr_code",
                         "ag_frame", "ag_code", "co_code", "co_consts", "co_names"})
_BUILTIN_NAMES = frozenset(n for n in dir(builtins) if not n.startswith("_"))
_IPYTHON_HISTORY = re.compile(r"^_i?\d+$")  # Out[5] is _5, In[5] is _i5
_DUNDER_WORD = re.compile(r"__[A-Za-z][A-Za-z0-9_]*?__")
_FORMAT_PRIVATE = re.compile(r"\{[^{}]*\._")
TYPE_MAKERS = frozenset({"type"})
# methods that change a container in place; with torch's in-place methods (a public name that
# ends in "_": zero_, copy_, add_ ...), called on a value the course's cells define, they change
# what the tests read (the answer empties OOM_EXAMPLES, the test's loop then checks nothing)
MUTATORS = frozenset({"clear", "pop", "popitem", "update", "setdefault", "append", "extend",
                      "insert", "remove", "sort", "reverse", "add", "discard",
                      "difference_update", "intersection_update",
                      "symmetric_difference_update"})


@dataclass(frozen=True)
class Violation:
    cell: str      # grade_id of the answer cell
    line: int      # 1-based line in that cell
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.cell} line {self.line}: {self.rule}: {self.detail}"


@dataclass(frozen=True)
class Policy:
    allowed_imports: frozenset[str] = DEFAULT_IMPORTS
    # grade_id -> dotted memlab names whose computation IS that exercise's answer
    forbidden: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # forbidden in every answer cell of the assignment
    forbidden_everywhere: tuple[str, ...] = ()
    # grade_id (or "*") -> dotted origins allowed in spite of a rule
    allow: Mapping[str, frozenset[str]] = field(default_factory=dict)


_COMMON_ALLOW = frozenset({"torch.utils._pytree.tree_map"})
def _policy(entry: Assignment) -> Policy:
    return Policy(forbidden=dict(entry.forbidden), forbidden_everywhere=entry.forbidden_everywhere)


# One policy per assignment, from the registry (memlab.grading.assignments): an assignment
# without an entry there fails tests/grading/test_assignments.py, not silently the default.
POLICIES: dict[str, Policy] = {name: _policy(a) for name, a in ASSIGNMENTS.items()}


def policy_for(assignment: str) -> Policy:
    return POLICIES.get(assignment, Policy())


def _top(dotted: str) -> str:
    return dotted.split(".", 1)[0]


def _in(dotted: str, modules: Iterable[str]) -> bool:
    return any(dotted == m or dotted.startswith(m + ".") for m in modules)


def _match_len(dotted: str, modules: Iterable[str]) -> int:
    return max((len(m) for m in modules if dotted == m or dotted.startswith(m + ".")), default=-1)


# Parts of memlab.grading a learner's answer may use: the answer engine's face (``ml.rubric``,
# a short name of memlab.MODULES; 07 forbids it by policy) and the visible tests' helpers.
LEARNER_GRADING = frozenset({"memlab.grading.answers.grade", "memlab.grading.visible"})


def canonical(dotted: str) -> str:
    """``memlab.<short name>...`` -> the module that defines it (memlab.MODULES), so every alias
    of a module is judged as that module: ``memlab.hostedcheck`` -> ``memlab.tools.hostedcheck``,
    ``memlab.levers.sdpa_attention`` -> ``memlab.lessons.levers.sdpa_attention``."""
    parts = dotted.split(".")
    if len(parts) >= 2 and parts[0] == "memlab" and parts[1] in _SHORT_NAMES:
        return ".".join(["memlab", _SHORT_NAMES[parts[1]], *parts[2:]])
    return dotted


def _denied(dotted: str, allowed: Iterable[str]) -> bool:
    """In DENIED_MODULES under its own name or its canonical one, unless a more specific allowed
    module covers it (IPython.display, ml.rubric)."""
    allowed = set(allowed) | LEARNER_GRADING
    for name in {dotted, canonical(dotted)}:
        d = _match_len(name, DENIED_MODULES)
        if d >= 0 and d >= _match_len(name, allowed):
            return True
    return False


_MISSING = object()


def _module_at(dotted: str) -> types.ModuleType | None:
    """The module object a dotted path names in the grader's own process, or None (a function,
    a class, or a module the grader has not imported). Looked up in module ``__dict__``s only:
    no module ``__getattr__`` runs, nothing is imported."""
    parts = canonical(dotted).split(".")
    obj = sys.modules.get(parts[0], _MISSING)
    for a in parts[1:]:
        if not isinstance(obj, types.ModuleType):
            return None
        obj = obj.__dict__.get(a, sys.modules.get(f"{obj.__name__}.{a}", _MISSING))
    return obj if isinstance(obj, types.ModuleType) else None


def reexport(dotted: str) -> str | None:
    """Where a dotted path really leads when a module on it is some other module's attribute:
    ``torch.sys.modules`` -> ``sys.modules``, ``os.path.os.system`` -> ``os.system``,
    ``memlab.importlib`` -> ``importlib``. None when every module on the path is the one its
    name says (``torch.nn.functional``, ``memlab.breakdown``: a short name of memlab.MODULES).
    The audit judges the path it leads to, so an allowed module's imports are no way around
    the list."""
    parts = canonical(dotted).split(".")
    obj = sys.modules.get(parts[0], _MISSING)
    for i, a in enumerate(parts[1:], 1):
        if not isinstance(obj, types.ModuleType):
            return None
        here = ".".join(parts[: i + 1])
        nxt = obj.__dict__.get(a, _MISSING)
        if isinstance(nxt, types.ModuleType) and nxt.__name__ != here \
                and here not in KNOWN_MODULE_ALIASES and canonical(here) != nxt.__name__:
            return ".".join([nxt.__name__, *parts[i + 1:]])
        obj = nxt
    return None


class _Checker(ast.NodeVisitor):
    def __init__(self, cell: str, policy: Policy, notebook_names: frozenset[str],
                 preset_aliases: Mapping[str, str]):
        self.cell = cell
        self.policy = policy
        self.notebook_names = notebook_names
        self.aliases: dict[str, str] = dict(preset_aliases)   # local name -> dotted origin
        self.preset = dict(preset_aliases)
        self.out: list[Violation] = []
        forb = tuple(policy.forbidden.get(cell, ())) + tuple(policy.forbidden_everywhere)
        self.forbidden = forb
        self.forbidden_last = {f.rsplit(".", 1)[-1] for f in forb if "." in f}
        self.allow = policy.allow.get(cell, frozenset()) | policy.allow.get("*", frozenset()) \
            | _COMMON_ALLOW
        self._done: set[int] = set()
        self._called: set[int] = set()   # Name nodes that are the function of a call
        self._alias_values: set[int] = set()  # `F = torch.nn.functional`: a module, not passed on
        self.own_names: set[str] = set()   # names the cell itself binds (set by audit_source)
        self.own_attributes: frozenset[str] = frozenset()  # the learner's own _fields
        self.scopes: list[set[str]] = []   # the names local to each function being visited
        self.course_aliases: dict[str, str] = {}  # `d = OOM_EXAMPLES`: d is the course's value

    # ---------------------------------------------------------------- helpers
    def flag(self, node: ast.AST, rule: str, detail: str) -> None:
        v = Violation(self.cell, getattr(node, "lineno", 0), rule, detail)
        if v not in self.out:
            self.out.append(v)

    def course_value(self, node: ast.AST) -> str | None:
        """The name of the course's own value (bound by a cell of the release, not a module)
        that ``node`` reaches through attributes and subscripts (``runs["ddp"].peak``), or
        None: the learner's own values, locals and modules are theirs to change."""
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        n = node.id
        if n in self.course_aliases:
            return self.course_aliases[n]
        if n not in self.notebook_names or n in self.aliases or n in self.own_names \
                or any(n in scope for scope in self.scopes):
            return None
        return n

    def check_course_data(self, node: ast.AST, target: ast.AST, how: str) -> None:
        name = self.course_value(target)
        if name is not None:
            self.flag(node, "changes the course's data",
                      f"{how} {name!r}, which the notebook's own cells define and its tests read "
                      "(work on a copy: copy.deepcopy, dict(...), t.clone())")

    def resolve(self, node: ast.AST) -> str | None:
        """Dotted origin of a Name/Attribute chain rooted in an import (or None)."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def check_origin(self, node: ast.AST, dotted: str, depth: int = 0) -> None:
        if _in(dotted, self.allow):
            return
        top = _top(dotted)
        if _denied(dotted, self.policy.allowed_imports):
            self.flag(node, "process-or-hook API", f"uses {dotted}")
            return
        if top in RESTRICTED_ATTRS:
            parts = dotted.split(".")
            if len(parts) < 2 or parts[1] not in RESTRICTED_ATTRS[top]:
                self.flag(node, "process-or-hook API",
                          f"uses {dotted} (allowed from {top}: {', '.join(sorted(RESTRICTED_ATTRS[top]))})")
                return
        if any(p.startswith("_") and not (p.startswith("__") and p.endswith("__"))
               and p not in PUBLIC_UNDERSCORE for p in dotted.split(".")[1:]):
            self.flag(node, "private API", f"uses {dotted}")
        self.check_forbidden(node, dotted)
        real = reexport(dotted)
        if real is not None and depth < 4:
            if not _in(_top(real), self.policy.allowed_imports) and not _in(real, self.allow):
                self.flag(node, "process-or-hook API",
                          f"uses {dotted}, which is the module {real.split('.')[0]} (not allowed "
                          "in answer cells, under any name)")
            else:
                self.check_origin(node, real, depth + 1)

    def check_module_value(self, node: ast.AST, dotted: str) -> None:
        """A module used as a value (put in a list, passed, returned) leaves the audit's sight:
        only ``module.attribute`` and ``name = module`` are followed."""
        if id(node) in self._alias_values or _in(dotted, self.allow):
            return
        if "." not in dotted and _top(dotted) in RESTRICTED_ATTRS:
            return  # said already, with the allowed attributes
        if _module_at(dotted) is not None:
            self.flag(node, "dynamic attribute",
                      f"passes the module {dotted} around as a value (use its attributes by "
                      "name, or `name = module`)")

    def check_forbidden(self, node: ast.AST, dotted: str) -> None:
        if not self.forbidden:
            return
        real = canonical(dotted)
        for f in self.forbidden:
            c = canonical(f)
            same_origin = (dotted == f or dotted.startswith(f + ".") or real == c
                           or real.startswith(c + "."))
            same_name = (_top(dotted) == "memlab" and _top(f) == "memlab"
                         and dotted.rsplit(".", 1)[-1] == f.rsplit(".", 1)[-1] and "." in dotted)
            # a forbidden module ("memlab.formulas") forbids its attributes under any path
            if same_origin or same_name:
                self.flag(node, "forbidden helper",
                          f"uses {dotted}, which computes this exercise's own answer")
                return

    # ---------------------------------------------------------------- imports
    def _import(self, node: ast.AST, module: str, bind: str | None, origin: str) -> None:
        if not (_in(module, self.policy.allowed_imports) or _in(origin, self.allow)) \
                or _denied(module, self.policy.allowed_imports) \
                or _denied(origin, self.policy.allowed_imports):
            self.flag(node, "import", f"imports {origin} (not allowed in answer cells)")
        else:
            self.check_origin(node, origin) if origin != module or "." in origin else None
        if bind:
            self.aliases[bind] = origin
            if self.preset.get(bind) != origin:  # `import memlab` again is harmless
                self._bind_top(node, bind)

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            if a.asname:
                self._import(node, a.name, a.asname, a.name)
            else:  # `import a.b` binds `a`
                self._import(node, a.name, None, a.name)
                self.aliases[_top(a.name)] = _top(a.name)
                if self.preset.get(_top(a.name)) != _top(a.name):
                    self._bind_top(node, _top(a.name))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.flag(node, "import", "relative import")
            return
        mod = node.module or ""
        for a in node.names:
            if a.name == "*":
                if mod in RESTRICTED_ATTRS or _top(mod) == "memlab" or _in(mod, DENIED_MODULES):
                    self.flag(node, "import", f"from {mod} import * (hides where names come from)")
                else:
                    self._import(node, mod, None, mod)
                continue
            self._import(node, mod, a.asname or a.name, f"{mod}.{a.name}")

    # ---------------------------------------------------------------- bindings
    def _bind_top(self, node: ast.AST, name: str) -> None:
        if getattr(node, "_memlab_top", False):
            if name in _BUILTIN_NAMES:
                self.flag(node, "builtins tampering", f"rebinds the builtin {name!r}")
            elif name in self.notebook_names:
                self.flag(node, "rebinds the notebook's name",
                          f"rebinds {name!r}, which the notebook's own cells define")

    def _targets(self, target: ast.AST) -> list[ast.AST]:
        if isinstance(target, (ast.Tuple, ast.List)):
            return [t for e in target.elts for t in self._targets(e)]
        if isinstance(target, ast.Starred):
            return self._targets(target.value)
        return [target]

    def _store(self, node: ast.AST, target: ast.AST, value: ast.AST | None) -> None:
        if isinstance(target, ast.Name) and target.id.startswith("__") and target.id.endswith("__"):
            self.flag(node, "introspection", f"binds {target.id}")
        if isinstance(target, ast.Name):
            # another name for the course's value is still the course's value (not a copy)
            course = self.course_value(value) if isinstance(
                value, (ast.Name, ast.Attribute, ast.Subscript)) else None
            if course is not None:
                self.course_aliases[target.id] = course
            else:
                self.course_aliases.pop(target.id, None)
            origin = self.resolve(value) if value is not None else None
            if origin:
                self.aliases[target.id] = origin
            else:
                self.aliases.pop(target.id, None)
            self._bind_top(node, target.id)
        elif isinstance(target, (ast.Attribute, ast.Subscript)):
            base = target.value
            while isinstance(base, ast.Subscript):
                base = base.value
            origin = self.resolve(base)
            if origin is not None:
                what = origin + (f".{target.attr}" if isinstance(target, ast.Attribute) else "[...]")
                self.flag(node, "monkeypatch", f"assigns {what}")
            else:
                self.check_course_data(node, target, "deletes from" if value is None and
                                       isinstance(node, ast.Delete) else "assigns into")

    def visit_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, (ast.Name, ast.Attribute)):
            self._alias_values.add(id(node.value))  # `F = torch.nn.functional` is followed
        self.visit(node.value)
        for t in node.targets:
            single = len(self._targets(t)) == 1
            for x in self._targets(t):
                self._store(node, x, node.value if single else None)
                self._visit_target(x)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
        self._store(node, node.target, node.value)
        self._visit_target(node.target)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.visit(node.value)
        self._store(node, node.target, None)
        self._visit_target(node.target)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        self._store(node, node.target, node.value)

    def visit_For(self, node: ast.For) -> None:
        # `for acc in [mine]: pass` binds the loop variable at the cell's top like `acc = ...`
        self.visit(node.iter)
        for x in self._targets(node.target):
            self._store(node, x, None)
            self._visit_target(x)
        for stmt in (*node.body, *node.orelse):
            self.visit(stmt)

    visit_AsyncFor = visit_For

    def visit_With(self, node: ast.With) -> None:
        for item in node.items:
            self.visit(item.context_expr)
            if item.optional_vars is not None:
                for x in self._targets(item.optional_vars):
                    self._store(node, x, None)
                    self._visit_target(x)
        for stmt in node.body:
            self.visit(stmt)

    visit_AsyncWith = visit_With

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.type is not None:
            self.visit(node.type)
        if node.name:
            self._bind_top(node, node.name)
        for stmt in node.body:
            self.visit(stmt)

    def visit_Delete(self, node: ast.Delete) -> None:
        for t in node.targets:
            self._store(node, t, None)
            self._visit_target(t)

    def _visit_target(self, t: ast.AST) -> None:
        # subscripts / attribute bases in a target are still reads (ml.__dict__[...] = ...)
        if isinstance(t, ast.Attribute):
            self._check_attr_name(t)
            self._alias_values.add(id(t.value))  # the base of `torch.x = ...`: the monkeypatch rule
            self.visit(t.value)
        elif isinstance(t, ast.Subscript):
            self._alias_values.add(id(t.value))
            self.visit(t.value)
            self.visit(t.slice)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name.startswith("__") and node.name.endswith("__") \
                and node.name not in DEFINABLE_DUNDERS:
            self.flag(node, "introspection",
                      f"defines {node.name} (an answer is a plain value; your own classes may "
                      f"define only {', '.join(sorted(DEFINABLE_DUNDERS))})")
        self._bind_top(node, node.name)
        self.aliases.pop(node.name, None)
        self.scopes.append(_local_names(node))
        try:
            self.generic_visit(node)
        finally:
            self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.scopes.append(_local_names(node))
        try:
            self.generic_visit(node)
        finally:
            self.scopes.pop()

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for kw in node.keywords:
            self.flag(node, "introspection", f"class {node.name}({kw.arg}=...)")
        self._bind_top(node, node.name)
        self.aliases.pop(node.name, None)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        for name in node.names:
            if name in _BUILTIN_NAMES or name in self.notebook_names:
                self.flag(node, "rebinds the notebook's name", f"global {name} inside a function")

    # ---------------------------------------------------------------- reads
    def _check_attr_name(self, node: ast.Attribute, resolved: bool = False) -> None:
        a = node.attr
        dunder = a.startswith("__") and a.endswith("__")
        if dunder and (a not in ALLOWED_DUNDERS or not isinstance(node.ctx, ast.Load)):
            self.flag(node, "introspection", f"uses .{a}")
        elif a in FRAME_ATTRS:
            self.flag(node, "introspection", f"uses .{a} (frames and code objects)")
        elif a.startswith("_") and not dunder and not resolved and a not in PUBLIC_UNDERSCORE \
                and a not in self.own_attributes and not (
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
                and node.value.id not in self.aliases):
            self.flag(node, "private API",
                      f"uses .{a} (underscore attributes only on your own self/cls)")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        dotted = self.resolve(node)
        self._check_attr_name(node, resolved=dotted is not None)
        if dotted is not None:
            if id(node) not in self._done:
                self.check_origin(node, dotted)
                if isinstance(node.ctx, ast.Load):
                    self.check_module_value(node, dotted)
            # inner parts of the chain are not checked again (os.path.join: os alone is fine)
            inner = node.value
            while isinstance(inner, ast.Attribute):
                self._done.add(id(inner))
                inner = inner.value
            if isinstance(inner, ast.Name):
                self._done.add(id(inner))
            return
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if id(node) in self._done:
            return
        n = node.id
        if n in ("_i", "_ii", "_iii") and n in self.own_names:
            pass  # the learner's own loop variable (`for _i in range(...)`)
        elif n in IPYTHON_NAMES:
            self.flag(node, "process-or-hook API", f"uses {n} (the IPython shell)")
        elif _IPYTHON_HISTORY.match(n) and n not in self.own_names:
            self.flag(node, "process-or-hook API", f"uses {n} (IPython's input/output history)")
        elif n == "__builtins__" or (n.startswith("__") and n.endswith("__") and n != "__name__"):
            self.flag(node, "builtins tampering", f"uses {n}")
        if n in DYNAMIC_CODE and n not in self.aliases:
            self.flag(node, "dynamic code", f"uses {n}()")
        if n in DYNAMIC_ATTR | {"hasattr"} and n not in self.aliases and n not in self.own_names \
                and isinstance(node.ctx, ast.Load) and id(node) not in self._called:
            # `g = getattr`, `partial(getattr, f)`, `map(getattr, ...)`: a lookup the audit
            # can no longer see, by whatever name or string it is made
            self.flag(node, "dynamic attribute", f"{n} used as a value (call {n}(obj, 'name') "
                                                 "directly, or write the attribute out)")
        origin = self.aliases.get(n)
        if origin is not None and isinstance(node.ctx, ast.Load):
            if _top(origin) in RESTRICTED_ATTRS and "." not in origin:
                self.flag(node, "process-or-hook API",
                          f"passes the module {origin} around (only {origin}.<allowed attribute>)")
            else:
                self.check_origin(node, origin)
                self.check_module_value(node, origin)

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in ("format", "format_map") and not (
                isinstance(f.value, ast.Constant) and isinstance(f.value.value, str)):
            # a template put together at run time ('{0.__glo' + 'bals__}') reads any attribute
            # its fields name; a literal template is checked as a string (visit_Constant)
            self.flag(node, "introspection",
                      f".{f.attr}() of a template that is not a string literal (its fields "
                      "can read attributes)")
        if isinstance(f, ast.Name):
            self._called.add(id(f))
        if isinstance(f, ast.Attribute) and (f.attr in MUTATORS or (
                f.attr.endswith("_") and not f.attr.startswith("_"))):
            self.check_course_data(node, f.value, f"calls .{f.attr}() on")
        if isinstance(f, ast.Name) and f.id in DYNAMIC_ATTR | {"hasattr"} \
                and f.id not in self.aliases and node.args:
            target = self.resolve(node.args[0])
            name = node.args[1] if len(node.args) > 1 else None
            literal = isinstance(name, ast.Constant) and isinstance(name.value, str)
            if target is not None:
                self.flag(node, "dynamic attribute", f"{f.id}() on {target}")
            elif f.id not in ("getattr", "hasattr"):
                self.flag(node, "dynamic attribute", f"{f.id}() (only plain attribute assignment "
                                                     "on your own objects)")
            elif not literal:
                self.flag(node, "dynamic attribute",
                          f"{f.id}() with a computed name (write the attribute out: x.name)")
            elif name.value.startswith("_") and name.value not in PUBLIC_UNDERSCORE \
                    and name.value not in ALLOWED_DUNDERS:
                self.flag(node, "introspection", f"{f.id}(..., {name.value!r})")
            if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and target is not None \
                    and isinstance(node.args[1].value, str):
                self.check_origin(node, f"{target}.{node.args[1].value}")
        if isinstance(f, ast.Name) and f.id in TYPE_MAKERS and f.id not in self.aliases \
                and len(node.args) == 3:
            self.flag(node, "dynamic code",
                      "type(name, bases, namespace) makes a class at run time")
        origin = self.resolve(f)
        if origin in ("torch.load", "numpy.load"):
            key, safe = (
                ("weights_only", True) if origin == "torch.load" else ("allow_pickle", False)
            )
            given = [k.value for k in node.keywords if k.arg == key]
            if not (
                len(given) == 1 and isinstance(given[0], ast.Constant) and given[0].value is safe
            ):
                self.flag(
                    node,
                    "dynamic code",
                    f"{origin}() without {key}={safe} (a pickle runs code when loaded)",
                )
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            hidden = [w for w in _DUNDER_WORD.findall(node.value) if w not in ALLOWED_DUNDERS]
            frames = FRAME_ATTRS & _words(node.value)
            if hidden or frames or _FORMAT_PRIVATE.search(node.value):
                what = (
                    ", ".join(sorted(set(hidden) | frames))
                    or "a private attribute in a format field"
                )
                self.flag(
                    node, "introspection", f"a string names {what} (attribute lookup by string)"
                )
        if isinstance(node.value, str) and self.forbidden_last:
            for name in self.forbidden_last:
                if name in node.value.replace(" ", ""):
                    words = {w for w in _words(node.value)}
                    if name in words:
                        self.flag(
                            node,
                            "forbidden helper",
                            f"names {name!r} in a string (a way to reach a forbidden helper)",
                        )


def _local_names(fn: ast.AST) -> set[str]:
    """The names local to a function or lambda: its parameters and what its body binds (not
    what it declares ``global``)."""
    a = fn.args
    names = {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
    names |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
    declared: set[str] = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            names.add(n.id)
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            declared |= set(n.names)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n is not fn:
            names.add(n.name)
        elif isinstance(n, ast.arg):
            names.add(n.arg)
    return names - declared


def _words(text: str) -> set[str]:
    import re

    return set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", text))


def _defined_attributes(tree: ast.AST) -> frozenset[str]:
    """Underscore attribute names the code defines itself: assigned on an object
    (``self._elems = ...``, ``b._n = 0``) or bound in a class body (``_cache = {}``, ``def _f``)."""
    out: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
            out.add(n.attr)
        elif isinstance(n, ast.ClassDef):
            for stmt in n.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    out.add(stmt.name)
                elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                    for t in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                        out |= {x.id for x in ast.walk(t) if isinstance(x, ast.Name)}
    return frozenset(a for a in out if a.startswith("_") and not a.startswith("__"))


def _names_in(source: str) -> tuple[set[str], frozenset[str]]:
    """(every name the code reads or binds, the underscore attributes it defines); empty for a
    cell that does not parse."""
    try:
        tree = ast.parse(_strip_magics(source)[0])
    except SyntaxError:
        return set(), frozenset()
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {
        n.name
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }
    return names, _defined_attributes(tree)


def _bound_names(tree: ast.AST) -> set[str]:
    """Names the code binds as loop or comprehension targets (``for _i in ...``): IPython's
    ``_i`` then is the learner's variable. Parameters and plain assignments do not count
    (``def f(_i=_i)`` and ``_i = _i`` read IPython's value)."""
    out: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.For, ast.AsyncFor, ast.comprehension)):
            out |= {x.id for x in ast.walk(n.target) if isinstance(x, ast.Name)}
    return out


def _mark_top(tree: ast.Module) -> None:
    for stmt in tree.body:
        stmt._memlab_top = True  # type: ignore[attr-defined]
        if isinstance(stmt, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            for sub in ast.walk(stmt):
                if isinstance(sub, (ast.stmt, ast.excepthandler)) and not isinstance(
                    sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
                ):
                    sub._memlab_top = True  # type: ignore[attr-defined]


def _strip_magics(source: str) -> tuple[str, list[int]]:
    """IPython syntax (``%magic``, ``!cmd``, ``x = !cmd``, ``obj?``) is found the way the kernel
    finds it, by IPython's own input transformer; the lines it turns into ``get_ipython()``
    calls are returned (each one a violation) and replaced by ``pass``, so the rest of the cell
    is still audited. Without IPython (a bare grader): lines that start with ``%`` or ``!``."""
    lines = source.splitlines()
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        out = TransformerManager().transform_cell(source).splitlines()
    except Exception:  # noqa: BLE001  IPython missing, or a cell it cannot transform
        out = None
    bad: list[int] = []
    if out is not None and len(out) == len(lines):
        for i, (raw, new) in enumerate(zip(lines, out), 1):
            if new.count("get_ipython()") > raw.count("get_ipython()"):
                bad.append(i)
    elif (
        out is not None and "get_ipython()" in "\n".join(out) and "get_ipython()" not in source
    ):  # a cell magic (%%...) turns the whole cell
        bad = list(range(1, len(lines) + 1))
    for i, line in enumerate(lines, 1):
        s = line.lstrip()
        if out is None and s.startswith(("%", "!")):
            bad.append(i)
    stripped = [
        (line[: len(line) - len(line.lstrip())] + "pass") if i in bad else line
        for i, line in enumerate(lines, 1)
    ]
    return "\n".join(stripped), sorted(set(bad))


def audit_source(
    source: str,
    cell: str,
    policy: Policy,
    *,
    notebook_names: Iterable[str] = (),
    preset_aliases: Mapping[str, str] | None = None,
    own_attributes: Iterable[str] = (),
) -> list[Violation]:
    """Violations of ``policy`` in one answer cell's ``source`` (grade_id ``cell``).
    ``own_attributes``: underscore attribute names the learner's own code defines (assigned on
    an object, or in a class body): ``budget._elems`` is then the learner's own field."""
    text, magic_lines = _strip_magics(source)
    out = [
        Violation(cell, i, "process-or-hook API", "IPython magic or shell command")
        for i in magic_lines
    ]
    try:
        tree = ast.parse(text)
    except SyntaxError as e:
        # Not Python, so nothing here can be audited, and IPython may still run it (its own
        # syntax, automagics): the cell is not run, like any other violation. An honest typo
        # loses the same points either way; the reason says where the parse stopped.
        return out + [
            Violation(
                cell,
                e.lineno or 1,
                "does not parse",
                f"not valid Python ({e.msg}); fix the syntax error",
            )
        ]
    _mark_top(tree)
    checker = _Checker(cell, policy, frozenset(notebook_names), preset_aliases or {})
    checker.own_names = _bound_names(tree)
    checker.own_attributes = frozenset(own_attributes) | _defined_attributes(tree)
    checker.visit(tree)
    return out + sorted(checker.out, key=lambda v: (v.line, v.rule, v.detail))


def _meta(cell) -> dict:
    return (cell.get("metadata") or {}).get("nbgrader") or {}


def _src(cell) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def notebook_context(released) -> tuple[frozenset[str], dict[str, str]]:
    """Names the released notebook's non-answer code cells bind (tests rely on them) and the
    import aliases they set up (``ml`` -> ``memlab``), which answer cells inherit."""
    names: set[str] = set()
    aliases: dict[str, str] = {}
    for cell in released.get("cells", []):
        if cell.get("cell_type") != "code" or _meta(cell).get("solution"):
            continue
        text, _ = _strip_magics(_src(cell))
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for stmt in tree.body:
            if isinstance(stmt, ast.Import):
                for a in stmt.names:
                    bound = a.asname or _top(a.name)
                    names.add(bound)
                    aliases[bound] = a.name if a.asname else _top(a.name)
            elif isinstance(stmt, ast.ImportFrom) and not stmt.level:
                for a in stmt.names:
                    if a.name != "*":
                        names.add(a.asname or a.name)
                        aliases[a.asname or a.name] = f"{stmt.module}.{a.name}"
            elif isinstance(stmt, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                names.add(stmt.name)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for t in targets:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name):
                            names.add(n.id)
    names -= {"_"}
    return frozenset(names), aliases


def audit_notebook(
    nb, released, assignment: str, policy: Policy | None = None
) -> dict[str, list[Violation]]:
    """{cell name: violations} for every code cell of ``nb`` whose source the learner controls:
    the answer (solution) cells, by grade_id, and every other code cell without a grade_id of the
    release (the release's free "try it" cells and cells the learner added), named ``added cell N`` (N: its position among the notebook's cells, from 1).
    Cells the release locks are restored from it before grading, so they are not audited."""
    policy = policy or policy_for(assignment)
    names, aliases = notebook_context(released)
    rel_ids = {
        _meta(c).get("grade_id") for c in released.get("cells", []) if _meta(c).get("grade_id")
    }
    answer_ids = {
        _meta(c).get("grade_id") for c in released.get("cells", []) if _meta(c).get("solution")
    }
    # Names bound by the release's free cells (code cells without a grade_id, which the learner
    # may edit): a learner's copy of such a cell may rebind them.
    free_names, _ = notebook_context(
        {"cells": [c for c in released.get("cells", []) if not _meta(c).get("grade_id")]}
    )
    found: dict[str, list[Violation]] = {}
    # A cell the learner added may define what an answer cell then calls (or rebind an answer's
    # own name): such a cell may use none of the assignment's forbidden helpers. An added cell
    # that shares no name with the answers (a learner checking a result against memlab's own
    # helper, printing a summary) is judged without them.
    every = tuple(dict.fromkeys(f for fs in policy.forbidden.values() for f in fs))
    answer_names: set[str] = set()
    own_attrs: set[str] = set()
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code" and (
            _meta(cell).get("grade_id") in answer_ids or _meta(cell).get("grade_id") not in rel_ids
        ):
            read, attrs = _names_in(_src(cell))
            own_attrs |= attrs
            if _meta(cell).get("grade_id") in answer_ids:
                answer_names |= read
    answer_names -= set(aliases) | set(names)  # ml, torch, the notebook's own: shared by all
    for i, cell in enumerate(nb.get("cells", []), start=1):
        gid = _meta(cell).get("grade_id")
        if cell.get("cell_type") != "code":
            continue
        cell_policy = policy
        if gid in answer_ids:
            name, own = gid, names - {gid}
        elif gid is None or gid not in rel_ids:
            name, own = added_cell_name(i), names - free_names
            binds, _ = notebook_context({"cells": [{**cell, "metadata": {}}]})
            if binds & answer_names:
                cell_policy = replace(policy, forbidden={**policy.forbidden, name: every})
            else:
                cell_policy = replace(policy, forbidden={}, forbidden_everywhere=())
        else:
            continue
        v = audit_source(
            _src(cell),
            name,
            cell_policy,
            notebook_names=own,
            preset_aliases=aliases,
            own_attributes=own_attrs,
        )
        if v:
            found[name] = v
    return found


def added_cell_name(position: int) -> str:
    """How the audit names a code cell the learner added (position among all cells, from 1)."""
    return f"added cell {position}"


def apply_audit(nb, released, assignment: str, policy: Policy | None = None) -> list[str]:
    """Audit ``nb`` (a submitted notebook, edited in place) and return reasons for the report.

    A violating answer cell is not run: its source becomes the released stub (so the tests of
    that exercise score 0, as for a blank answer; other exercises are graded normally), preceded
    by a ``NEEDS MANUAL REVIEW:`` line that names the rule, so ``reviews`` and review.csv list it.
    """
    found = audit_notebook(nb, released, assignment, policy)
    if not found:
        return []
    stubs = {
        _meta(c).get("grade_id"): _src(c)
        for c in released.get("cells", [])
        if _meta(c).get("solution")
    }
    reasons = []
    for i, cell in enumerate(nb.get("cells", []), start=1):
        gid = _meta(cell).get("grade_id")
        name = gid if gid in found else added_cell_name(i)
        if cell.get("cell_type") != "code" or name not in found:
            continue
        first = found[name][0]
        more = f" (+{len(found[name]) - 1} more)" if len(found[name]) > 1 else ""
        why = f"audit: {first}{more}"
        cell["outputs"] = []
        if gid in stubs:
            cell["source"] = f"print({REVIEW_PREFIX + ' ' + why!r})\n" + stubs[gid]
            reasons.append(f"{why}: answer cell not run, its tests score 0 pending review")
        else:  # a cell the learner added: not run; the whole notebook waits for review
            cell["source"] = f"print({REVIEW_PREFIX + ' ' + why!r})\n"
            reasons.append(f"{why}: added cell not run; the notebook's scores need review")
    return reasons


def clone_notebook(nb):
    return copy.deepcopy(nb)
