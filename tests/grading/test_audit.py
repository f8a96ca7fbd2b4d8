"""memlab.autograde.security.audit: the static audit of answer cells (no kernel, fast).

Every official solution and every released stub passes (no false positive); every hostile
source below is flagged with the expected rule; legitimate uses of restricted modules pass.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from memlab.autograde.security import audit

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENTS = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir() and p.name[:2].isdigit())


def _nb(path: Path) -> dict:
    return json.loads(path.read_text())


def _release(a: str) -> dict:
    [path] = sorted((ROOT / "notebooks" / a).glob("*.ipynb"))
    return _nb(path)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_solutions_and_releases_pass(assignment):
    rel = _release(assignment)
    for path in sorted((ROOT / "solutions" / assignment).glob("*.ipynb")):
        assert audit.audit_notebook(_nb(path), rel, assignment) == {}
    assert audit.audit_notebook(rel, rel, assignment) == {}


# (assignment, answer grade_id, source, rule expected in the violation)
HOSTILE = [
    ("01_where_memory_goes", "count_param_bytes", "def count_param_bytes(model):\n    return ml.param_bytes(model)", "forbidden helper"),
    ("01_where_memory_goes", "count_param_bytes", "from memlab.breakdown import param_bytes as pb\ndef count_param_bytes(model):\n    return pb(model)", "forbidden helper"),
    ("01_where_memory_goes", "count_param_bytes", "import memlab.breakdown as b\ncount_param_bytes = b.param_bytes", "forbidden helper"),
    ("01_where_memory_goes", "count_grad_bytes", "def count_grad_bytes(model):\n    return getattr(ml, 'grad_bytes')(model)", "forbidden helper"),
    ("01_where_memory_goes", "count_optimizer_state_bytes", "f = ml\ndef count_optimizer_state_bytes(o):\n    return f.optimizer_state_bytes(o)", "forbidden helper"),
    ("01_where_memory_goes", "count_saved_activation_bytes", "def count_saved_activation_bytes(fn, model):\n    return ml.breakdown.saved_activation_bytes(fn)", "forbidden helper"),
    ("01_where_memory_goes", "predict_training_bytes", "import types\n_e = ml.calculator.estimate\npredict_training_bytes = types.FunctionType(_e.__code__, _e.__globals__)", "forbidden helper"),
    ("01_where_memory_goes", "predict_training_bytes", "from memlab.calculator import estimate\ndef predict_training_bytes(**kw):\n    return estimate(**kw)", "forbidden helper"),
    ("01_where_memory_goes", "count_param_bytes", "def count_param_bytes(model):\n    return ml.__dict__['param_bytes'](model)", "introspection"),
    ("06_sharding", "predict_rank_bytes", "def predict_rank_bytes(shapes, strategy, world_size):\n    return [ml.distributed._fsdp_rows(s[0], world_size, 0) for s in shapes]", "forbidden helper"),
    ("06_sharding", "predict_rank_bytes", "from memlab.distributed import _zero1_owner as z\npredict_rank_bytes = lambda *a: z(*a)", "forbidden helper"),
    ("00_setup", "tensor_bytes", "import sys\nsys.settrace(lambda *a: None)", "process-or-hook API"),
    ("00_setup", "tensor_bytes", "import sys as s\ns.setprofile(None)", "process-or-hook API"),
    ("02_checkpointing", "predict_ratio", "ip = get_ipython()\nip.input_transformers_post.append(lambda lines: [])", "process-or-hook API"),
    ("02_checkpointing", "predict_ratio", "from IPython.core.interactiveshell import InteractiveShell\nInteractiveShell.transform_cell = lambda self, c: ''", "process-or-hook API"),
    ("03_mixed_precision", "forward_loss", "from jupyter_client.session import Session\nSession.send = lambda *a, **k: None", "process-or-hook API"),
    ("03_mixed_precision", "forward_loss", "import ipykernel\n", "import"),
    ("03_mixed_precision", "amp_step", "def amp_step(*a):\n    from IPython.display import publish_display_data\n    get_ipython().displayhook({'score': 1})", "process-or-hook API"),
    ("04_accumulation", "accumulate_gradients", "import importlib\nimportlib.reload = lambda m: m", "import"),
    ("04_accumulation", "accumulate_gradients", "import sys\nsys.meta_path.insert(0, object())", "process-or-hook API"),
    ("04_accumulation", "accumulate_gradients", "torch.nn.Module.zero_grad = lambda self, set_to_none=True: None", "monkeypatch"),
    ("04_accumulation", "accumulate_gradients", "from torch import Tensor\nTensor.__int__ = lambda self: 0", "monkeypatch"),
    ("05_oom_clinic", "configure_job", "ml.oom.run_job = lambda *a, **k: None", "monkeypatch"),
    ("05_oom_clinic", "configure_job", "setattr(ml.oom, 'fits', lambda *a, **k: True)", "dynamic attribute"),
    ("07_interview_prep", "answer_q1", "ml.rubric.grade_text = lambda *a, **k: 1.0\nanswer_q1 = 'x'", "monkeypatch"),
    ("09_serving_memory", "kv_cache_bytes", "def kv_cache_bytes(layers, kv_heads, head_dim, seq, batch, dtype):\n    return ml.calculator.estimate(layers=layers, heads=kv_heads, hidden=kv_heads * head_dim, seq_len=seq, batch=batch, precision='bf16', serving=True)['kv cache']", "forbidden helper"),
    ("09_serving_memory", "max_batch", "from memlab.calculator import estimate as e\ndef max_batch(budget_bytes, cfg, context, weight_bytes=2, kv_bytes=2, act_bytes_per_seq=0):\n    return 1", "forbidden helper"),
    ("09_serving_memory", "max_batch", "import memlab.lessons.calculator as c\nf = c.estimate", "forbidden helper"),
    ("07_interview_prep", "answer_q1", "import memlab.rubric as r\nr.grade_numeric = None", "monkeypatch"),
    ("07_interview_prep", "answer_q2", "answer_q2 = globals().get('expected')", "dynamic code"),
    ("07_interview_prep", "answer_q3", "answer_q3 = vars()['_expected']", "dynamic code"),
    ("02_checkpointing", "predict_ratio", "import os\nexec(open(os.path.join(os.path.dirname(ml.__file__), '..', '..', 'solutions', 'x')).read())", "introspection"),
    ("02_checkpointing", "predict_ratio", "exec('x = 1')", "dynamic code"),
    ("00_setup", "tensor_bytes", "import sqlite3\nsqlite3.connect('gradebook.db').execute('BEGIN EXCLUSIVE')", "import"),
    ("00_setup", "tensor_bytes", "import os\nos.rename('a', 'b')", "process-or-hook API"),
    ("00_setup", "tensor_bytes", "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)", "process-or-hook API"),
    ("00_setup", "tensor_bytes", "import subprocess\nsubprocess.Popen(['sh', '-c', 'sleep 30; sqlite3 gradebook.db'])", "import"),
    ("00_setup", "tensor_bytes", "import os\nif os.fork() == 0:\n    pass", "process-or-hook API"),
    ("00_setup", "tensor_bytes", "import threading\nthreading.Timer(1, print).start()", "import"),
    ("00_setup", "tensor_bytes", "import ctypes\nctypes.CDLL(None)", "import"),
    ("00_setup", "tensor_bytes", "import gc\n[o for o in gc.get_objects()]", "import"),
    ("00_setup", "tensor_bytes", "import inspect\ninspect.currentframe()", "import"),
    ("00_setup", "tensor_bytes", "def isinstance(a, b):\n    return True", "builtins tampering"),
    ("00_setup", "tensor_bytes", "__builtins__.print = None", "builtins tampering"),
    ("00_setup", "tensor_bytes", "import builtins\nbuiltins.type = None", "import"),
    ("00_setup", "tensor_bytes", "ml = None", "rebinds the notebook's name"),
    ("00_setup", "tensor_bytes", "try:\n    1 / 0\nexcept Exception as e:\n    g = e.__traceback__.tb_frame.f_globals", "introspection"),
    ("00_setup", "tensor_bytes", "def tensor_bytes(shape, dtype):\n    return ml.storage_bytes(torch.empty(shape, dtype=dtype))", "forbidden helper"),
    ("00_setup", "tensor_bytes", "%load_ext something\ndef tensor_bytes(s, d):\n    return 0", "process-or-hook API"),
    ("00_setup", "tensor_bytes", "x = torch._C._VariableFunctions", "private API"),
    ("00_setup", "tensor_bytes", "from types import FunctionType\nf = FunctionType", "process-or-hook API"),
    ("00_setup", "tensor_bytes", "import memlab.grading as g\ng.guard = lambda: None", "import"),
    ("00_setup", "tensor_bytes", "def f(g=get_ipython):\n    return g()", "process-or-hook API"),
    ("00_setup", "tensor_bytes", "def f(v=vars):\n    return v()", "dynamic code"),
    ("00_setup", "tensor_bytes", "_ih = _ih\nsrc = _ih[-1]", "process-or-hook API"),
    # an allowed module's own imports are judged as what they are (#31: values, not names)
    ("00_setup", "tensor_bytes", "mods = torch.sys.modules", "process-or-hook API"),
    ("00_setup", "tensor_bytes", "import typing\nf = typing.sys._getframe", "process-or-hook API"),
    ('00_setup', 'tensor_bytes',
     'import warnings\nm = warnings.sys.modules',
     'process-or-hook API'),
    # what evaluates a string in the cell's globals: string annotations read back
    ('00_setup', 'tensor_bytes',
     "import typing\ndef f(a: 'get_ipython'):\n    pass\nip = typing.get_type_hints(f)['a']()",
     'process-or-hook API'),
    ('00_setup', 'tensor_bytes',
     "from typing import ForwardRef\nr = ForwardRef('sys')",
     'process-or-hook API'),
    ('00_setup', 'tensor_bytes',
     'import functools\n@functools.singledispatch\ndef f(x):\n    pass',
     'process-or-hook API'),
    ("00_setup", "tensor_bytes", "import os\nos.path.os.system('id')", "process-or-hook API"),
    ('00_setup', 'tensor_bytes',
     'from torch import inspect as i\ni.stack()',
     'process-or-hook API'),
    ("00_setup", "tensor_bytes", "g = ml.importlib.import_module('gc')", "process-or-hook API"),
    ("00_setup", "tensor_bytes", "import random\n[random][0].Random = int", "dynamic attribute"),
    ("00_setup", "tensor_bytes", "def f(m=torch):\n    return m", "dynamic attribute"),
    # string-based attribute lookup, defined dunders, dispatch modes, pickles
    ('00_setup', 'tensor_bytes',
     "def f(fn):\n    return getattr(fn, '__glo' + 'bals__')",
     'dynamic attribute'),
    ('00_setup', 'tensor_bytes',
     "def f(fn):\n    return getattr(fn, '__globals__')",
     'introspection'),
    ('00_setup', 'tensor_bytes',
     "import string\nstring.Formatter().get_field('0.x', [print], {})",
     'process-or-hook API'),
    ("00_setup", "tensor_bytes", "k = '{0.__globals__}'.format(print)", "introspection"),
    ("00_setup", "tensor_bytes", "k = '{0._private}'.format(print)", "introspection"),
    ('00_setup', 'tensor_bytes',
     "import operator\ng = operator.attrgetter('x')",
     'process-or-hook API'),
    ('00_setup', 'tensor_bytes',
     "class A:\n    __module__ = 'memlab.grading.guard'",
     'introspection'),
    ('00_setup', 'tensor_bytes',
     'class Any(float):\n    def __eq__(self, other):\n        return True\n'
     'tensor_bytes = lambda s, d: Any(0)',
     'introspection'),
    ('00_setup', 'tensor_bytes',
     "class Late:\n    def __del__(self):\n        print('runs when the grader frees me')",
     'introspection'),
    ('00_setup', 'tensor_bytes',
     'class M(type):\n    pass\nclass A(metaclass=M):\n    pass',
     'introspection'),
    ("00_setup", "tensor_bytes", "A = type('A', (), {})", "dynamic code"),
    ("00_setup", "tensor_bytes", "x = torch.ones(1)\nx.__class__ = int", "introspection"),
    ("00_setup", "tensor_bytes", "def f(t):\n    return t._base", "private API"),
    ('00_setup', 'tensor_bytes',
     'from torch.utils._python_dispatch import TorchDispatchMode\nclass M(TorchDispatchMode):\n'
     '    pass',
     'import'),
    ('00_setup', 'tensor_bytes',
     'from torch.overrides import TorchFunctionMode\nTorchFunctionMode().__enter__()',
     'import'),
    ('00_setup', 'tensor_bytes',
     "lib = torch.library.Library('aten', 'IMPL')",
     'process-or-hook API'),
    ("00_setup", "tensor_bytes", "w = torch.load('data.pt')", "dynamic code"),
    ("00_setup", "tensor_bytes", "w = torch.load('data.pt', weights_only=False)", "dynamic code"),
    ('00_setup', 'tensor_bytes',
     "import timeit\ntimeit.timeit('import os')",
     'process-or-hook API'),
    ("00_setup", "tensor_bytes", "import weakref\nweakref.finalize(ml, print)", "import"),
    # IPython syntax anywhere on a line, and what is not Python at all
    ("00_setup", "tensor_bytes", "x = !cat /etc/passwd\nprint(x)", "process-or-hook API"),
    ("00_setup", "tensor_bytes", "x = %env", "process-or-hook API"),
    ("00_setup", "tensor_bytes", "%%bash\nsleep 100", "process-or-hook API"),
    ("00_setup", "tensor_bytes", "cd ..", "does not parse"),
    ("00_setup", "tensor_bytes", "def tensor_bytes(shape, dtype:\n    return 0", "does not parse"),
    ("00_setup", "tensor_bytes", "print(_5, _i3)", "process-or-hook API"),
    # changing in place what the course's cells define and the tests read (not a rebinding)
    ("10_debugging_memory", "read_oom",
     "OOM_EXAMPLES.clear()\ndef read_oom(text):\n    raise ValueError", "changes the course's data"),
    ("10_debugging_memory", "read_oom",
     "def read_oom(text):\n    OOM_EXAMPLES.popitem()\n    return None", "changes the course's data"),
    ("05_oom_clinic", "configure_job", "BUDGETS['tight'] = 10**12", "changes the course's data"),
    ("05_oom_clinic", "configure_job", "del BUDGETS['tight']", "changes the course's data"),
    ("05_oom_clinic", "configure_job", "BUDGETS.update(tight=10**12)", "changes the course's data"),
    ("06_sharding", "predict_rank_bytes", "for k in runs:\n    runs[k].clear()",
     "changes the course's data"),
    ("06_sharding", "predict_rank_bytes", "SIZES.sort()", "changes the course's data"),
    ("10_debugging_memory", "read_oom", "d = OOM_EXAMPLES\nd.clear()", "changes the course's data"),
    ("06_sharding", "predict_rank_bytes", "def f():\n    r = runs['ddp']\n    r.clear()",
     "changes the course's data"),
    # getattr handed on as a value: the lookup it makes later is invisible (blind round r4)
    ("00_setup", "tensor_bytes", "g = getattr\nx = g(len, 'x')", "dynamic attribute"),
    ("00_setup", "tensor_bytes", "import functools\nh = functools.partial(getattr, len)",
     "dynamic attribute"),
    ("00_setup", "tensor_bytes", "ga = (lambda: getattr)()", "dynamic attribute"),
    ("00_setup", "tensor_bytes", "found = list(map(getattr, [len], ['x']))", "dynamic attribute"),
    # a loop, a with or an except binds the notebook's name like an assignment (r4)
    ("04_accumulation", "accumulate_gradients", "for acc in [object()]:\n    pass",
     "rebinds the notebook's name"),
    ("04_accumulation", "accumulate_gradients",
     "import contextlib\nwith contextlib.nullcontext(1) as acc:\n    pass", "rebinds the notebook's name"),
    ("04_accumulation", "accumulate_gradients", "try:\n    1 / 0\nexcept ZeroDivisionError as acc:\n"
     "    pass", "rebinds the notebook's name"),
    # blind r5 (a01): a format template put together at run time reads any attribute
    ("01_where_memory_goes", "count_param_bytes",
     "def count_param_bytes(m):\n    t = '{0.__glo' + 'bals__[In]}'\n    return t.format(count_param_bytes)",
     "introspection"),
    ("01_where_memory_goes", "count_param_bytes",
     "def count_param_bytes(m):\n    return str.format(''.join(['{0', '.f_', 'back}']), m)",
     "introspection"),
]


@pytest.mark.parametrize("assignment,gid,source,rule", HOSTILE,
                         ids=[f"{h[0][:2]}-{i}" for i, h in enumerate(HOSTILE)])
def test_hostile_sources_are_flagged(assignment, gid, source, rule):
    rel = _release(assignment)
    names, aliases = audit.notebook_context(rel)
    found = audit.audit_source(source, gid, audit.policy_for(assignment),
                               notebook_names=names - {gid}, preset_aliases=aliases)
    assert any(v.rule == rule for v in found), [str(v) for v in found]
    assert all(v.cell == gid and v.line >= 1 for v in found)


LEGIT = [
    "import os\np = os.path.join('a', 'b')",
    "import sys\nprint('note', file=sys.stderr)\nn = sys.getsizeof([])",
    "import types\nns = types.SimpleNamespace(a=1)",
    'class Cache:\n    def __init__(self):\n        self._seen = {}\n    def __call__(self, k):\n'
    '        return self._seen.get(k)',
    "from collections import namedtuple\nP = namedtuple('P', 'a b')\nd = P(1, 2)._asdict()",
    "import torch.nn.functional as F\nfrom torch import nn\ny = nn.functional.relu(torch.ones(2))",
    "for name in ('weight', 'bias'):\n    print(getattr(torch.nn.Linear(2, 2), 'weight').shape)",
    "if __name__ == '__main__':\n    print('run as a script')",
    'import time\nt0 = time.perf_counter()\nx = sum(range(10))\n'
    "print(f'{time.perf_counter() - t0:.3f} s')",
    "state = torch.load('ckpt.pt', weights_only=True)",
    'from typing import Optional, List\ndef f(x: Optional[int] = None) -> List[int]:\n'
    '    return [x or 0]',
    "import functools\n@functools.lru_cache(maxsize=None)\ndef f(n):\n    return n",
    'class Budget:\n    def __init__(self):\n        self._elems = 0\nb = Budget()\n'
    'print(b._elems)',
    "y = torch.ops.aten.mm.default(torch.ones(2, 2), torch.ones(2, 2))",
    'def f():\n    """Uses 50% of memory.\n!not a shell line inside a string\n"""\n    return 1',
    "import torch.nn.functional as F\ndef f(model, x):\n    model.weight.data = x\n    return F.relu(x)",
    "import memlab as ml\nx = ml.checkpointing.segment_bounds(8, 2)",
    "def count_param_bytes(model):\n    seen = {}\n    for p in model.parameters():\n        seen[p.untyped_storage().data_ptr()] = p.untyped_storage().nbytes()\n    return int(sum(seen.values()))",
    "x = 3  # note: param_bytes in a comment is fine",
    "for _i in range(3):\n    print(_i)",
    "from IPython.display import Image, display",
    # the learner's own values, parameters and copies are theirs to change
    "import copy\nmine = copy.deepcopy(OOM_EXAMPLES)\nmine.clear()",
    "def f(OOM_EXAMPLES):\n    OOM_EXAMPLES.clear()\n    return OOM_EXAMPLES",
    "def f(x):\n    seen = dict(OOM_EXAMPLES)\n    seen.pop('a', None)\n    x.add_(1)\n"
    "    return seen",
    "print(sorted(OOM_EXAMPLES.items()))",
    "f = lambda OOM_EXAMPLES: OOM_EXAMPLES.update(a=1)",
    "def f(m):\n    return getattr(m, 'weight', None) is not None and hasattr(m, 'bias')",
    "import contextlib\nwith contextlib.nullcontext(1) as mine:\n    pass",
    "try:\n    1 / 0\nexcept ZeroDivisionError as err:\n    print(err)",
    "x = 3.14159\nprint('{:.1f} GB and {} layers'.format(x, 4))",
]


@pytest.mark.parametrize("source", LEGIT)
def test_legitimate_code_passes(source):
    found = audit.audit_source(source, "count_param_bytes", audit.policy_for("01_where_memory_goes"),
                               notebook_names={"OOM_EXAMPLES", "torch", "ml"},
                               preset_aliases={"ml": "memlab", "torch": "torch"})
    assert found == [], [str(v) for v in found]


def test_apply_replaces_only_the_violating_cell():
    a = "01_where_memory_goes"
    rel = _release(a)
    [sol] = sorted((ROOT / "solutions" / a).glob("*.ipynb"))
    nb = _nb(sol)
    cell = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "count_param_bytes")
    cell["source"] = "def count_param_bytes(model):\n    return ml.param_bytes(model)\n"
    reasons = audit.apply_audit(nb, rel, a)
    assert len(reasons) == 1 and "count_param_bytes line 2: forbidden helper" in reasons[0]
    assert "pending review" in reasons[0]
    assert cell["source"].startswith("print(") and "NEEDS MANUAL REVIEW: audit: count_param_bytes line 2" in cell["source"]
    assert "ml.param_bytes" not in cell["source"] and "raise NotImplementedError" in cell["source"]
    # the other answers are untouched: the solution of count_grad_bytes is still there
    other = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "count_grad_bytes")
    assert "NotImplementedError" not in "".join(other["source"])


def test_cells_the_learner_added_are_audited_too():
    """A code cell with no grade_id of the release (added by the learner, or a grade cell whose
    id was invented) runs in the grading kernel like an answer cell, so it is audited like one:
    a violating added cell is not run and is reported by position; a harmless one is left alone."""
    import copy

    rel = _release("00_setup")
    nb = copy.deepcopy(rel)
    hook = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
            "source": "import sys\nsys.settrace(lambda *a: None)"}
    forged = {"cell_type": "code", "metadata": {"nbgrader": {"grade_id": "not_in_release"}},
              "outputs": [], "execution_count": None, "source": "ml.units = None"}
    harmless = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                "source": "x = torch.zeros(3)\nprint(x.numel())"}
    nb["cells"][2:2] = [hook, harmless]
    nb["cells"].append(forged)
    found = audit.audit_notebook(nb, rel, "00_setup")
    assert set(found) == {"added cell 3", f"added cell {len(nb['cells'])}"}
    assert found["added cell 3"][0].rule == "process-or-hook API"
    reasons = audit.apply_audit(nb, rel, "00_setup")
    assert len(reasons) == 2 and all(r.startswith("audit: added cell") for r in reasons)
    import ast

    [stmt] = ast.parse(nb["cells"][2]["source"]).body  # only the review line is left to run
    assert isinstance(stmt, ast.Expr) and stmt.value.func.id == "print"
    assert nb["cells"][2]["source"].startswith("print('NEEDS MANUAL REVIEW: audit: added cell 3")
    assert nb["cells"][3]["source"] == harmless["source"]
    assert audit.audit_notebook(nb, rel, "00_setup") == {}


def test_an_added_cell_may_check_against_memlab_unless_an_answer_uses_it():
    """A learner's own cell that compares an answer with memlab's helper is honest work; the
    same helper in an added cell that defines something an answer cell reads (or rebinds an
    answer's name) is the forbidden helper reached another way."""
    import copy

    a = "01_where_memory_goes"
    rel = _release(a)
    [sol] = sorted((ROOT / "solutions" / a).glob("*.ipynb"))
    nb = _nb(sol)
    ids = [c["metadata"].get("nbgrader", {}).get("grade_id") for c in nb["cells"]]
    at = ids.index("count_param_bytes")

    def added(source):
        return {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                "source": source}

    check = copy.deepcopy(nb)
    check["cells"].insert(at + 1, added("print(count_param_bytes(torch.nn.Linear(3, 3)),\n"
                                        "      ml.param_bytes(torch.nn.Linear(3, 3)))"))
    assert audit.audit_notebook(check, rel, a) == {}
    helper = copy.deepcopy(nb)
    helper["cells"].insert(at, added("def _pb(model):\n    return ml.param_bytes(model)"))
    cell = helper["cells"][at + 1]
    cell["source"] = "def count_param_bytes(model):\n    return _pb(model)\n"
    found = audit.audit_notebook(helper, rel, a)
    assert [v.rule for vs in found.values() for v in vs] == ["forbidden helper"], found
    rebind = copy.deepcopy(nb)
    rebind["cells"].insert(at + 1, added("count_param_bytes = ml.param_bytes"))
    assert any(v.rule == "forbidden helper" for vs in audit.audit_notebook(rebind, rel, a).values()
               for v in vs)


def test_every_mutant_passes_the_audit_unflagged():
    """The audit's cost to honest work: each mutant of tests/mutants/ is a learner's plausible
    mistake, written by hand and by blind rounds, never an attack; none may be flagged (a flagged
    answer is not run, so its learner would get a review line instead of the mistake's message)."""
    import sys
    import nbformat
    sys.path.insert(0, str(ROOT / "tests"))
    import mutants
    flagged, n = [], 0
    for assignment in mutants.assignments():
        [path] = sorted((ROOT / "solutions" / assignment).glob("*.ipynb"))
        solution, rel = nbformat.read(path, as_version=4), _release(assignment)
        for m in mutants.load(assignment):
            found = audit.audit_notebook(json.loads(nbformat.writes(mutants.apply(solution, m))),
                                         rel, assignment)
            n += 1
            if found:
                flagged.append(f"{assignment} {m.id}: {found}")
    assert n >= 250 and not flagged, f"{len(flagged)} of {n} mutants flagged:\n" + "\n".join(flagged)
