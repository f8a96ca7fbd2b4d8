"""The seams between a sandboxed learner and the unsandboxed grader (issue 31), one class batch
of 00_setup per sandbox this machine has (Landlock warm forks, bubblewrap), with the static
audit OFF: each attack runs, and the layer under test alone must hold it.

* links: learner code plants links in its folder to a file of "the instructor" and to the job's
  solutions, replaces its own notebook by a link to another instructor file, and leaves a
  watcher process re-planting them, and changes the mode and times of instructor files: no
  instructor file changes, the feedback folder holds the
  notebook's HTML only, nothing the grader copied is a link or holds the secret or a solution;
* script: HTML, JavaScript, SVG outputs and an added markdown cell that set the page title:
  the autograded notebook (what formgrader renders) and the feedback carry no script, and in
  a real browser (chromium) the feedback page's title stays the course's;
* socket: a Unix socket server listening outside the sandbox is never reached;
* chain: a 30-deep chain of processes, each in its own session, is dead when the batch ends;
* flood: an answer cell that prints 96 MiB: the grader keeps 8 MiB of it and a note (its own
  memory is not spent on the rest), the stderr line still marks the cell, the tests still run;
* the honest classmate in the same batch keeps full marks.
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import uuid
from pathlib import Path

import nbformat
import pytest

from course_support import make_course, pids_with_arg, with_answer
from memlab.autograde.batch.grade_class import GradeSettings, grade_class
from memlab.autograde.batch.runner import sandbox_mode
from memlab.autograde.security import bwrap, landlock

A = "00_setup"
CORRECT = """
def tensor_bytes(shape, dtype):
    n = 1
    for d in shape:
        n *= int(d)
    return n * dtype.itemsize
"""
SECRET = "SECRET-CANARY-7f3a"
VICTIM = "VICTIM-UNCHANGED"
PWN = "PWNED"
CHROMIUM = os.environ.get(
    "MEMLAB_CHROMIUM", "/usr/bin/chromium"
)  # as tests/notebooks/test_browser.py
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
KINDS = [
    k for k, ok in (("landlock", landlock.available()[0]), ("bwrap", bwrap.available()[0])) if ok
]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not KINDS, reason="neither Landlock nor bubblewrap is usable here"),
]


def _links(secret: Path, victim: Path) -> str:
    return (
        CORRECT
        + f'''
import os, subprocess, sys, time
_PLANT = """
import os, time
for _ in range(600):
    for _name, _to in (("secret.txt", {str(secret)!r}),
                       ("solution.ipynb", "../../../../../solutions/00_setup/00_setup.ipynb"),
                       ("gradebook.db", "../../../../work/gradebook.db"),
                       ("00_setup.ipynb", {str(victim)!r})):
        try:
            if not os.path.islink(_name):
                if os.path.exists(_name):
                    os.unlink(_name)
                os.symlink(_to, _name)
        except OSError:
            pass
    time.sleep(0.05)
"""
for _f in ({str(victim)!r}, {str(secret)!r}):  # Landlock governs neither: the seal does
    for _do in (lambda: os.chmod(_f, 0o777), lambda: os.utime(_f, (0, 0))):
        try:
            _do()
        except OSError:
            pass
exec(_PLANT.replace("range(600)", "range(1)"))
subprocess.Popen([sys.executable, "-c", _PLANT], start_new_session=True)
time.sleep(0.5)
'''
    )


SCRIPT = (
    CORRECT
    + f"""
from IPython.display import HTML, Javascript, SVG, display
display(HTML("<b>bold</b><script>document.title='{PWN}-html'</script>"
             "<img src=x onerror=\\"document.title='{PWN}-img'\\">"))
display(Javascript("document.title='{PWN}-js'"))
_svg = '<svg xmlns="http://www.w3.org/2000/svg" '
display(SVG(_svg + 'onload="document.title=\\'{PWN}-svg\\'"></svg>'))
# what is not a tag: an image's metadata written into its tag, a markdown link, MathJax's \\href
display({{"image/png": "AAAA"}}, raw=True,
        metadata={{"image/png": {{"width": "1 onerror=document.title='{PWN}-width'"}}}})
display({{"text/markdown": "[hint](javascript:document.title='{PWN}-mdout')"}}, raw=True)
display(HTML("$\\\\href{{javascript:document.title='{PWN}-mj'}}{{proof}}$"))
"""
)
MARKDOWN = (f"<img src=x onerror=\"document.title='{PWN}-md'\"> a learner's note "
            f"<script>document.title='{PWN}-md2'</script>\n\n"
            f"[the hint](javascript:document.title='{PWN}-link') "
            f"[again](jav&#97;script:document.title='{PWN}-link2')\n\n"
            f"$\\href{{javascript:document.title='{PWN}-mj2'}}{{x}}$\n\n"
            # braces nested in the argument, a macro alias, an entity for the backslash
            f"$\\href{{javascript:document.title='{PWN}-mj3'.concat({{}})}}{{x}}$ "
            f"$$\\let\\h\\href \\h{{javascript:document.title='{PWN}-mj4'}}{{y}}$$ "
            f"$&#92;href{{javascript:document.title='{PWN}-mj5'.concat({{}})}}{{z}}$")


def _socket(path: Path) -> str:
    return (
        CORRECT
        + f"""
import socket
_reached = []
for _fam in (socket.AF_UNIX,):
    try:
        _c = socket.socket(_fam)
        _c.settimeout(2)
        _c.connect({str(path)!r})
        _c.sendall(b"HELLO-FROM-THE-SANDBOX")
        _reached.append("sent")
    except OSError as _e:
        _reached.append(repr(_e))
print("socket:", _reached)
"""
    )


def _chain(marker: str) -> str:
    return (
        CORRECT
        + f'''
import subprocess, sys, time
_LINK = """
import os, subprocess, sys, time
os.setsid()
d = int(sys.argv[1])
if d > 0:
    subprocess.Popen([sys.executable, "-c", sys.argv[2], str(d - 1), sys.argv[2]])
time.sleep(900)  # {marker}
"""
subprocess.Popen([sys.executable, "-c", _LINK, "30", _LINK])
time.sleep(4)
_cg = sorted(set(l.strip().rsplit("/", 1)[-1] for l in open("/proc/self/cgroup")))
print("cgroups:", " ".join(_cg))
'''
    )


class _Server:
    """A Unix socket server outside every sandbox; records what reaches it."""

    def __init__(self, path: Path):
        self.path, self.got = path, []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        os.chmod(path, 0o777)
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.stop = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    self.got.append(conn.recv(100) or b"(connected)")
                except OSError:
                    self.got.append(b"(connected)")

    def close(self):
        self.stop = True
        self.thread.join()
        self.sock.close()


# 96 MiB of output in 1 MiB lines (a loop left printing), and one error line on stderr at the end
FLOOD = """
for _ in range(96):
    print("x" * (1 << 20))
import sys
print("the last word", file=sys.stderr)
"""



@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("seams_course")
    make_course(root, [A])
    return root


@pytest.fixture(scope="module", params=KINDS)
def graded(request, course, tmp_path_factory):
    kind = request.param
    tmp = tmp_path_factory.mktemp(f"seams_{kind}")
    instructor = tmp / "instructor"
    instructor.mkdir()
    (instructor / "secret.txt").write_text(SECRET)
    (instructor / "victim.txt").write_text(VICTIM)
    modes = {}
    for name in ("secret.txt", "victim.txt"):
        os.chmod(instructor / name, 0o600)
        modes[name] = 0o600
    sock_dir = Path("/tmp") / f"mls-{uuid.uuid4().hex[:8]}"  # short: a socket path has <= 107 bytes
    sock_dir.mkdir()
    server = _Server(sock_dir / "s")
    marker = f"CHAIN-{uuid.uuid4().hex}"
    released = nbformat.read(course / "notebooks" / A / f"{A}.ipynb", as_version=4)
    scripted = with_answer(released, "tensor_bytes", SCRIPT)
    scripted.cells.append(nbformat.v4.new_markdown_cell(MARKDOWN))
    subs = {
        "a_links": with_answer(
            released, "tensor_bytes", _links(instructor / "secret.txt", instructor / "victim.txt")
        ),
        "b_script": scripted,
        "c_socket": with_answer(released, "tensor_bytes", _socket(server.path)),
        "d_chain": with_answer(released, "tensor_bytes", _chain(marker)),
        "e_honest": with_answer(released, "tensor_bytes", CORRECT),
        "f_flood": with_answer(released, "tensor_bytes", CORRECT + FLOOD),
    }
    for student, nb in subs.items():
        folder = tmp / "class" / student / A
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{A}.ipynb")
    settings = GradeSettings(
        workers=2,
        cell_timeout=60,
        submission_timeout=300,
        memory_mb=3072,
        audit=False,
        sandbox_kind=kind,
    )
    assert sandbox_mode(settings)[0] == kind
    try:
        report = grade_class(
            tmp / "class",
            config_path=course / "autograder" / "nbgrader_config.py",
            out=tmp / "report",
            settings=settings,
            progress=False,
        )
        alive = pids_with_arg(marker)
    finally:
        server.close()
    yield {
        "kind": kind,
        "course": course,
        "instructor": instructor,
        "server": server,
        "report": report,
        "alive": alive,
        "marker": marker,
        "modes": modes,
    }
    for pid in pids_with_arg(marker):  # never leave them behind, whatever the test found
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    for p in sock_dir.iterdir():
        p.unlink()
    sock_dir.rmdir()


def _student_files(course: Path, student: str) -> list[Path]:
    out = []
    for step in ("autograded", "feedback"):
        folder = course / "autograder" / "work" / step / student
        out += [p for p in folder.rglob("*")] if folder.exists() else []
    return out


def test_links_are_never_followed(graded):
    course, instructor = graded["course"], graded["instructor"]
    assert (instructor / "victim.txt").read_text() == VICTIM, (
        "nbgrader wrote through a planted link"
    )
    for name in ("victim.txt", "secret.txt"):
        st = (instructor / name).stat()
        assert (st.st_mode & 0o777, int(st.st_mtime) > 0) == (graded["modes"][name], True), name
    files = _student_files(course, "a_links")
    assert files, "nothing was graded"
    assert not [p for p in files if p.is_symlink()], [p for p in files if p.is_symlink()]
    feedback = course / "autograder" / "work" / "feedback" / "a_links" / A
    assert sorted(p.name for p in feedback.iterdir()) == [f"{A}.html"]
    autograded = course / "autograder" / "work" / "autograded" / "a_links" / A
    assert sorted(p.name for p in autograded.iterdir()) == [f"{A}.ipynb"], "a planted file was kept"
    for p in files:
        if p.is_file():
            assert SECRET.encode() not in p.read_bytes(), p
    html = (feedback / f"{A}.html").read_text()
    assert "BEGIN HIDDEN TESTS" not in html and "_hidden_rng" not in html, (
        "hidden tests in the feedback"
    )
    row = graded["report"].by_submission[("a_links", A)]
    assert row["score"] == 3, row["reason"]


def test_script_never_reaches_the_instructors_pages(graded):
    course = graded["course"]
    nb = nbformat.read(
        course / "autograder" / "work" / "autograded" / "b_script" / A / f"{A}.ipynb", as_version=4
    )
    outputs = json.dumps([c.get("outputs", []) for c in nb.cells])
    added = [
        c.source for c in nb.cells if c.cell_type == "markdown" and "a learner's note" in c.source
    ]
    assert PWN not in outputs, (
        "script left in an output of the autograded notebook (formgrader renders it)"
    )
    assert added, added
    # the alias `\let\h\href` loses its backslashes, and so does its use (`\h` is no control
    # word of plain math): `h{...}` is text MathJax shows as typed; nothing else of any payload
    rest = re.sub(r"\\?h\{javascript:document\.title='" + PWN + r"-mj4'\}", "", added[0])
    assert PWN not in rest and "\\let" not in added[0], added
    html = (course / "autograder" / "work" / "feedback" / "b_script" / A / f"{A}.html").read_text()
    # the answer cell's own source is shown, escaped; nothing of it may be live markup
    live = re.findall(r"<[a-zA-Z][^<>]*\son[a-z]+\s*=[^<>]*>", html)  # a real tag with a handler
    assert not live, live
    assert f"<script>document.title='{PWN}" not in html
    assert not re.search(r"href\s*=\s*[\"']?\s*(javascript|jav&#97;script):", html, re.I), (
        "a script link"
    )
    typeset = re.sub(r"<pre[^>]*>.*?</pre>", "", html, flags=re.S)  # what MathJax reads (not <pre>)
    assert "\\href" not in typeset, "a MathJax link (MathJax follows javascript: hrefs)"
    assert not re.search(r"\\(let|def|newcommand|require)\b", typeset), "a MathJax macro definition"
    assert "<b>bold</b>" in html, "the harmless part of the output is kept"
    if graded["kind"] != KINDS[0]:
        return  # one browser check is enough
    playwright = pytest.importorskip("playwright.sync_api")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM}")
    with playwright.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(
                (
                    course / "autograder" / "work" / "feedback" / "b_script" / A / f"{A}.html"
                ).as_uri()
            )
            page.wait_for_timeout(1500)
            for link in page.query_selector_all("a"):  # a link's target runs when clicked
                try:
                    link.click(timeout=500)
                except Exception:  # noqa: BLE001  a hidden or detached link
                    pass
            page.wait_for_timeout(300)
            title = page.title()
            scripted = page.evaluate(
                "Array.from(document.querySelectorAll('a')).map(a => a.href)"
                ".filter(h => h.trim().toLowerCase().startsWith('javascript:'))"
            )
        finally:
            browser.close()
    assert PWN not in title, title
    assert scripted == [], scripted


def test_a_socket_outside_is_unreachable(graded):
    assert graded["server"].got == [], graded["server"].got
    assert graded["report"].by_submission[("c_socket", A)]["score"] == 3


def test_a_process_chain_dies_with_its_job(graded):
    assert graded["alive"] == [], (
        f"{len(graded['alive'])} processes of the chain outlived the batch"
    )
    from memlab.autograde.security import cgroup

    if cgroup.available() and graded["kind"] == "landlock":
        # (bubblewrap's kernel sees its own cgroup namespace, and its PID namespace ends it)
        # where this machine allows job cgroups, the kernel ran in its job's (security.cgroup)
        course = graded["course"]
        nb = nbformat.read(
            course / "autograder" / "work" / "autograded" / "d_chain" / A / f"{A}.ipynb",
            as_version=4,
        )
        text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
        assert re.search(rf"cgroups:.*\b{cgroup.PREFIX}", text), text[-500:]


def test_the_honest_classmate_keeps_full_marks(graded):
    row = graded["report"].by_submission[("e_honest", A)]
    assert row["score"] == 3 and "all tests pass" in row["reason"], row["reason"]


def test_a_flood_of_output_is_cut_where_it_arrives(graded):
    course = graded["course"]
    path = course / "autograder" / "work" / "autograded" / "f_flood" / A / f"{A}.ipynb"
    assert path.stat().st_size < 10 * 2**20, f"{path.stat().st_size / 2**20:.0f} MiB kept"
    nb = nbformat.read(path, as_version=4)
    [cell] = [
        c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "tensor_bytes"
    ]
    streams = [o for o in cell.outputs if o.output_type == "stream"]
    assert any("output cut by the grader" in o.text and o.name == "stdout" for o in streams)
    assert any(o.name == "stderr" for o in streams), "the cell's write to stderr was dropped"
    row = graded["report"].by_submission[("f_flood", A)]
    assert row["score"] == 3, row["reason"]


def test_output_cap_keeps_what_decides_a_score():
    """Unit: past the cap an error (shortened) and one stderr mark per cell are still kept."""
    import nbclient.client as nc

    from memlab.autograde.batch.runner import cap_outputs

    def msg(kind, **content):
        return {
            "msg_type": kind,
            "content": content,
            "parent_header": {"msg_id": "m"},
            "header": {"msg_type": kind},
            "metadata": {},
        }

    cap_outputs(4096)
    try:
        client = nc.NotebookClient(nbformat.v4.new_notebook())
        client.reset_execution_trackers()
        client.clear_before_next_output = False  # set when a cell starts (nbclient)
        outs: list = []
        for _ in range(20):
            client.output(outs, msg("stream", name="stdout", text="y" * 1000), None, 0)
        client.output(outs, msg("stream", name="stderr", text="e" * 1000), None, 0)
        client.output(outs, msg("stream", name="stderr", text="e" * 1000), None, 0)
        client.output(
            outs,
            msg("error", ename="AssertionError", evalue="v" * 5000, traceback=["t" * 10**6]),
            None,
            0,
        )
    finally:
        cap_outputs(0)
    kept = sum(len(o.get("text", "")) for o in outs if o.output_type == "stream")
    assert kept < 6000, kept
    assert [o.name for o in outs if o.output_type == "stream" and "cut by" in o.text] == [
        "stdout",
        "stderr",
    ]
    [err] = [o for o in outs if o.output_type == "error"]
    assert err.ename == "AssertionError" and len(err.evalue) == 1000 and err.traceback == []
    assert nc.NotebookClient.output.__name__ == "output" and not hasattr(
        nc.NotebookClient.output, "__wrapped__"
    )


def test_the_grading_child_has_a_heap_limit(tmp_path):
    """Unit: _limit_own_memory bounds this process's heap (RLIMIT_DATA), not its libraries."""
    import subprocess
    import sys

    code = (
        "from memlab.autograde.batch.processes import _limit_own_memory\n"
        "import torch\n"
        "_limit_own_memory(768)\n"
        "small = bytearray(64 << 20)\n"
        "try:\n    big = bytearray(1 << 30)\n    print('allocated')\n"
        "except MemoryError:\n    print('MemoryError')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "MemoryError", (out.stdout, out.stderr[-500:])


@pytest.mark.parametrize("text", [
    "$\\href{javascript:f({})}{see}$",                       # braces nested in the argument
    "$$\\let\\h\\href \\h{javascript:f()}{k}$$",                 # an alias of \\href
    "$$\\def\\lnk#1{\\href{#1}{x}} \\lnk{javascript:f()}$$",       # a macro that makes one
    "$\\newcommand{\\l}{\\href} \\l{javascript:f()}{x}$",
    "&#92;href{javascript:f({})}{y} &#x5c;url{javascript:f()} &bsol;class{x}{y}",
    "$\\require{html} \\style{color:red}{x} \\cssId{a}{b} \\bbox[5px,border:2px]{c}$",
])
def test_no_mathjax_macro_that_links_defines_or_loads_survives(text):
    from memlab.autograde.security.sanitize import clean_markdown

    out = clean_markdown(text)
    live = re.findall(r"(?:\\|&#0*92;?|&#x0*5c;?|&bsol;)\s*(href|url|class|cssId|style|let|def|"
                      r"newcommand|require|bbox)(?![A-Za-z])", out, re.I)
    assert not live, (text, out)


def test_plain_mathjax_math_is_kept():
    from memlab.autograde.security.sanitize import clean_markdown

    text = "$\\frac{n}{k} + k$ is least at $k = \\sqrt{n}$: $\\mathrm{cost} \\approx 2\\sqrt{n}$"
    assert clean_markdown(text) == text
