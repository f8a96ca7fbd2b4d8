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

from course_support import make_course, with_answer
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
"""
)
MARKDOWN = (f"<img src=x onerror=\"document.title='{PWN}-md'\"> a learner's note "
            f"<script>document.title='{PWN}-md2'</script>")


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


def _marked(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if marker.encode() in fh.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


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
        alive = _marked(marker)
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
    for pid in _marked(marker):  # never leave them behind, whatever the test found
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
    assert added and PWN not in added[0], added
    html = (course / "autograder" / "work" / "feedback" / "b_script" / A / f"{A}.html").read_text()
    # the answer cell's own source is shown, escaped; nothing of it may be live markup
    live = re.findall(r"<[a-zA-Z][^<>]*\son[a-z]+\s*=[^<>]*>", html)  # a real tag with a handler
    assert not live, live
    assert f"<script>document.title='{PWN}" not in html
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
            title = page.title()
        finally:
            browser.close()
    assert PWN not in title, title


def test_a_socket_outside_is_unreachable(graded):
    assert graded["server"].got == [], graded["server"].got
    assert graded["report"].by_submission[("c_socket", A)]["score"] == 3


def test_a_process_chain_dies_with_its_job(graded):
    assert graded["alive"] == [], (
        f"{len(graded['alive'])} processes of the chain outlived the batch"
    )


def test_the_honest_classmate_keeps_full_marks(graded):
    row = graded["report"].by_submission[("e_honest", A)]
    assert row["score"] == 3 and "all tests pass" in row["reason"], row["reason"]
