"""What a learner's notebook shows an instructor or a classmate, with no script in it.

Used by: :mod:`memlab.autograde.batch.runner` (every autograded notebook is sanitised before
nbgrader's ``generate_feedback`` renders it and before it is copied into the course, where
formgrader renders it), tests/grading/test_seams.py.

nbgrader renders notebooks to HTML unsanitised: a learner's ``display(HTML("<script>..."))``,
an ``application/javascript`` output, an SVG with ``onload`` or an added markdown cell with an
``<img onerror=...>`` ran script in the instructor's formgrader page and in the feedback HTML.
nbconvert's own ``HTMLExporter.sanitize_html`` escapes the course's headings and tables as
text (nbconvert 7.17 with bleach 6.4), so the notebook itself is cleaned instead, once, with
nh3 (the Python binding of the Rust sanitiser ammonia, https://github.com/messense/nh3):

* outputs: ``text/html`` and ``text/markdown`` cleaned (allowed tags and attributes only, no
  ``javascript:`` URLs, no event handlers, no ``<script>``/``<style>``/``<iframe>``);
  ``application/javascript``, ``image/svg+xml`` (an SVG can carry script), ``text/latex``
  (MathJax follows ``\\href``), widget views (nbconvert renders saved widget state with a
  script from a CDN, and an HTML widget's value becomes ``innerHTML``) and every other
  mimetype but plain text and raster images are dropped, ``text/plain`` kept so the cell
  still shows something; the notebook's saved widget state is dropped;
* markdown and raw cells whose source is not one of the release's own cells (the learner added
  or edited them) cleaned; the course's own cells are left as written;
* cell attachments other than images dropped;
* no URL that reaches outside the page (attachment:, mailto: and relative ones only: a
  tracking image or a look-alike link in the instructor's view is gone; a bare URL in text is
  written ``https[:]//...``, so the renderer does not make it a link);
* what nh3 cannot see because it is not a tag: a markdown link, reference or autolink whose
  target's scheme is not attachment, mailto or a relative link (``[x](javascript:...)``:
  nbconvert's markdown renderer allows harmful protocols) points to ``#`` instead, and MathJax's
  ``\\href``, ``\\url``, ``\\class``, ``\\cssId``, ``\\style`` macros are removed (MathJax follows a
  ``javascript:`` href), and every macro that links, styles, draws or moves text over the page
  (``\\rule``, ``\\raise``, ``\\smash``, ``\\color``...), loads an extension or defines a
  macro (``\\let``, ``\\def``, ``\\newcommand``, ``\\require``...) loses its backslash, however
  its backslash is written; beyond that list, TeX is judged by an allow-list: only the control
  words of plain math keep their backslash (``\\enclose``, ``\\Huge``, ``\\!`` do not); in
  markdown cells, markdown and HTML outputs;
* the learner's markdown cells lose their images, inline and attached (a drawn "PASS" badge
  under a failing test reads as the grader's);
* output metadata: only a numeric ``width``/``height`` is kept (nbconvert writes them into the
  image tag unquoted: ``1 onerror=...`` became an event handler), everything else dropped.
"""

from __future__ import annotations

import html as _html
import re
from urllib.parse import unquote

__all__ = ["sanitize_notebook", "hide_hidden_lines", "clean_html", "clean_markdown",
           "KEPT_MIMETYPES"]

# Rendered as data or escaped text by nbconvert's templates: safe to keep as they are.
KEPT_MIMETYPES = frozenset({"text/plain", "image/png", "image/jpeg", "image/gif", "image/webp"})
_CLEANED = frozenset({"text/html", "text/markdown"})


# What a learner's content may point at: nothing outside the page (no tracking image, no link to
# a look-alike page in the instructor's view), only what it carries itself.
SAFE_SCHEMES = frozenset({"attachment", "mailto"})


def clean_html(html: object) -> str:
    """``html`` with nothing that runs or reaches out: nh3's allow-list of tags and attributes,
    and URLs of :data:`SAFE_SCHEMES` or relative ones only."""
    import nh3

    text = "".join(html) if isinstance(html, list) else str(html)
    return nh3.clean(text, url_schemes=set(SAFE_SCHEMES))
# [text](target), [label]: target, <scheme:target>
_LINK = re.compile(
    r"(\]\(\s*<?)([^)\s>]*)|(^[ \t]*\[[^\]\n]+\]:[ \t]*<?)(\S+)|(<)([a-zA-Z][\w+.-]*:[^>\s]*)(?=>)",
    re.M,
)
_MATHJAX_LINK_HEAD = re.compile(r"\\(?:href|url|class|cssId|style)\s*(?=\{)", re.I)
# A MathJax macro that links, styles, loads an extension or defines another macro loses its
# backslash wherever it stands (MathJax then typesets the word): braces nested in its argument
# (``\href{javascript:f({})}``), an alias (``\let\h\href``, ``\def``, ``\newcommand``) or a
# backslash written as an HTML entity (``&#92;href``, which the browser decodes before MathJax
# reads the page) cannot bring it back.
_BACKSLASH = r"(?:\\|&#0*92;?|&#x0*5c;?|&bsol;|&Backslash;)+"
_MATHJAX_MACROS = re.compile(
    _BACKSLASH + r"\s*(href|url|class|cssId|style|let|def|gdef|edef|xdef|newcommand|"
    r"renewcommand|providecommand|newenvironment|renewenvironment|DeclareMathOperator|require|"
    r"data|unicode|html|mmlToken|bbox|texttip|mathtip|toggle|tooltip|fragment|action|"
    r"csname|expandafter|string|"
    # what draws over the page or moves text onto it: a white \rule raised over a failing test,
    # a coloured "PASS" (plain math stays math)
    r"rule|Rule|raise|lower|smash|color|colorbox|fcolorbox|llap|rlap|clap|mathllap|mathrlap|"
    r"mathclap|phantom|vphantom|hphantom|hspace|kern|mkern|mskip|hskip|moveleft|moveright|"
    r"Space|strut|boxed|fbox|raisebox|textcolor|pagecolor)(?![A-Za-z])", re.I)


# TeX in a learner's markdown is judged by an allow-list: the control words of plain math keep
# their backslash, every other one loses it (MathJax then typesets the word), so no macro that
# draws, sizes, colours, moves or encloses (\enclose, \Huge, \negthinspace...) is missed by
# a list of what to forbid. Control symbols: the spacing and escapes of plain math only (not
# the negative space \!).
_TEX_ALLOWED = frozenset("""
alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu xi pi
varpi rho varrho sigma varsigma tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi
Pi Sigma Upsilon Phi Psi Omega frac dfrac tfrac sqrt cdot times div pm mp le leq ge geq ne neq
approx sim simeq equiv propto infty sum prod int log ln exp sin cos tan max min lim to
rightarrow leftarrow Rightarrow Leftarrow leftrightarrow mapsto in notin subset subseteq cup cap
ldots cdots dots vdots ddots left right big Big bigl bigr Bigl Bigr mathrm mathbf mathit mathcal
mathbb mathsf mathtt text textrm textbf textit operatorname hat bar tilde vec dot ddot overline
underline lceil rceil lfloor rfloor langle rangle quad qquad partial nabla forall exists prime
circ star ast mid vert Vert lvert rvert lVert rVert binom begin end aligned cases matrix pmatrix
bmatrix top gg ll sqcup oplus otimes odot cdotp colon
""".split())
_TEX_WORD = re.compile(r"((?:\\|&#0*92;?|&#x0*5c;?|&bsol;|&Backslash;)+)\s*([A-Za-z]+)", re.I)
_TEX_SYMBOL = re.compile(r"(?:\\|&#0*92;?|&#x0*5c;?|&bsol;|&Backslash;)+(?=[!/])", re.I)


def _tex_allowed(text: str) -> str:
    """``text`` with every TeX control word outside :data:`_TEX_ALLOWED` (and the negative space
    ``\\!``) stripped of its backslash, however the backslash is written."""
    text = _TEX_WORD.sub(lambda m: m.group(0) if m.group(2) in _TEX_ALLOWED else m.group(2), text)
    return _TEX_SYMBOL.sub("", text)


_IMAGE = re.compile(r"<img\b[^>]*>|!\[([^\]]*)\]\([^)]*\)", re.I)


def _no_images(text: str) -> str:
    """A learner's markdown without its images (a drawn "PASS" badge under a failing test reads
    as the grader's): each is replaced by its alt text, marked."""
    return _IMAGE.sub(lambda m: f"[image removed: {m.group(1) or 'learner image'}]", text)


def _safe_target(target: str) -> bool:
    """A link target kept as it is: http(s), mailto, or one without a scheme (a relative
    link, an anchor). Judged after decoding entities and %-escapes and dropping whitespace
    and control characters, as a browser reads it (``jav&#97;script:`` is ``javascript:``)."""
    plain = unquote(_html.unescape(target))
    plain = re.sub(r"[\x00-\x20\x7f]+", "", plain).lower()
    m = re.match(r"([a-z][a-z0-9+.-]*):", plain)
    return m is None or m.group(1) in SAFE_SCHEMES


def clean_markdown(text: object) -> str:
    """``text`` (markdown, or HTML that MathJax will typeset) with no tag, link or MathJax
    macro that runs script: nh3's allow-list, then unsafe link targets and MathJax links."""
    out = clean_html(text)

    def fix(m: re.Match) -> str:
        for lead, target in ((1, 2), (3, 4), (5, 6)):
            if m.group(lead) is not None:
                t = m.group(target)
                return m.group(lead) + (t if _safe_target(t) else "#")
        return m.group(0)

    out = _LINK.sub(fix, out)
    out = _MATHJAX_MACROS.sub(lambda m: m.group(1), _drop_mathjax_links(out))
    out = _tex_allowed(out)
    # a bare URL is made a link by the renderer (nbconvert's markdown autolinks it): defanged
    return _BARE_URL.sub(lambda m: m.group(1) + "[:]//", out)


_BARE_URL = re.compile(r"\b([a-zA-Z][\w+.-]*)://")


def _drop_mathjax_links(text: str) -> str:
    """``text`` without MathJax's link and style macros and their first argument, braces
    nested in it included (``\\href{javascript:f({})}{x}`` leaves ``{x}``)."""
    out, pos = [], 0
    for m in _MATHJAX_LINK_HEAD.finditer(text):
        if m.start() < pos:
            continue
        depth, i = 0, m.end()
        while i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
            if depth == 0:
                break
        out.append(text[pos:m.start()])
        pos = i
    return "".join(out) + text[pos:]


def _clean_metadata(out: dict) -> int:
    meta = out.get("metadata")
    if not isinstance(meta, dict) or not meta:
        return 0

    def numeric(d: dict) -> dict:
        return {k: v for k, v in d.items() if k in ("width", "height") and type(v) in (int, float)}

    cleaned = numeric(meta)
    for mime, sub in meta.items():
        if isinstance(sub, dict) and numeric(sub):
            cleaned[mime] = numeric(sub)
    out["metadata"] = cleaned
    return int(cleaned != meta)


_BASE64 = re.compile(r"^[A-Za-z0-9+/=\s]*$")


def _clean_output(out: dict) -> int:
    changed = _clean_metadata(out)
    data = out.get("data")
    if isinstance(data, dict):
        for mime in list(data):
            if mime in _CLEANED:
                before = data[mime]
                data[mime] = clean_markdown(before)
                changed += data[mime] != ("".join(before) if isinstance(before, list) else before)
            elif mime not in KEPT_MIMETYPES or (mime.startswith("image/") and not _BASE64.match(
                    "".join(data[mime]) if isinstance(data[mime], list) else str(data[mime]))):
                # an image is base64 or nothing: nbconvert writes it into a src attribute
                del data[mime]
                changed += 1
        if not data:
            data["text/plain"] = "(output removed: it could run script in the grader's pages)"
    return changed


def sanitize_notebook(nb, release_sources: set[str] | frozenset[str] = frozenset()) -> int:
    """Clean ``nb`` (an nbformat notebook node, changed in place); returns how many outputs and
    cells were changed. ``release_sources``: the sources of the release's markdown and raw
    cells, left as they are."""
    changed = 0
    if nb.get("metadata", {}).pop("widgets", None) is not None:
        changed += 1
    for cell in nb.cells:
        for out in cell.get("outputs", []) or []:
            changed += _clean_output(out)
        learners = cell.cell_type in ("markdown", "raw") and cell.source not in release_sources
        if learners:
            cleaned = _no_images(clean_markdown(cell.source))
            if cleaned != cell.source:
                cell.source = cleaned
                changed += 1
            if cell.get("attachments"):
                cell["attachments"] = {}
                changed += 1
        attachments = cell.get("attachments")
        if isinstance(attachments, dict):
            for name in list(attachments):
                kinds = attachments[name] if isinstance(attachments[name], dict) else {}
                if not kinds or any(
                    not str(k).startswith("image/") or k == "image/svg+xml"
                    or not _BASE64.match("".join(v) if isinstance(v, list) else str(v))
                    for k, v in kinds.items()   # base64 or nothing: it is written into a src
                ):
                    del attachments[name]
                    changed += 1
    return changed


def _is_test_cell(cell) -> bool:
    meta = (cell.get("metadata") or {}).get("nbgrader") or {}
    return (cell.get("cell_type") == "code" and isinstance(meta, dict) and bool(meta.get("grade"))
            and not meta.get("solution"))


_HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS[ \t]*$(.*?)^[ \t]*### END HIDDEN TESTS", re.M | re.S)
HIDDEN_LINE = "[a line of a hidden test: removed]"


def hide_hidden_lines(nb, min_chars: int = 12) -> int:
    """Every output line of ``nb`` that holds a line of one of its hidden tests (of at least
    ``min_chars`` characters, stripped) is replaced by :data:`HIDDEN_LINE`: learner code run
    by a hidden test can read its source (linecache, a warning's frame) and print it, and the
    output reaches the feedback, whose cell source ClearHiddenTests empties. Returns how many
    outputs changed. A test's own messages are evaluated strings, not its source lines."""
    sources = [cell.source if isinstance(cell.source, str) else "".join(cell.source)
               for cell in nb.cells]
    # hidden tests live in the course's test cells only (restored from the release before
    # grading): a learner's cell that writes "### BEGIN HIDDEN TESTS" around the lines a failing
    # submission prints must not get them scrubbed from the report
    tests = [src for cell, src in zip(nb.cells, sources) if _is_test_cell(cell)]
    hidden = {line.strip() for src in tests for block in _HIDDEN.findall(src)
              for line in block.splitlines() if len(line.strip()) >= min_chars}
    public = "\n".join(_HIDDEN.sub("", src) for src in sources)
    hidden = {h for h in hidden if h not in public}   # what the notebook shows anyway stays
    if not hidden:
        return 0

    # a line as it was printed (any indent), or inside a longer one when the hidden
    # line is its own (a test's _hidden_ names, or long): a test's message may quote a short
    # piece of code ("if scheduler is not None:") that its hidden reference also holds
    inside = {h for h in hidden if "_hidden" in h or len(h) >= 40}

    def leaks(line: str) -> bool:
        s = line.strip()
        return s in hidden or any(h in line for h in inside)

    def scrub(text):
        joined = "".join(text) if isinstance(text, list) else text
        if not isinstance(joined, str) or not any(h in joined for h in hidden):
            return text, False
        lines = joined.split("\n")
        if not any(leaks(line) for line in lines):
            return text, False
        return "\n".join(HIDDEN_LINE if leaks(line) else line for line in lines), True

    changed = 0
    for cell in nb.cells:
        for out in cell.get("outputs", []) or []:
            hit = False
            if "text" in out:
                out["text"], h = scrub(out["text"])
                hit |= h
            for key in ("evalue", "ename"):
                if key in out:
                    out[key], h = scrub(out[key])
                    hit |= h
            if isinstance(out.get("traceback"), list):
                new = [scrub(t) for t in out["traceback"]]
                out["traceback"] = [t for t, _ in new]
                hit |= any(h for _, h in new)
            data = out.get("data")
            if isinstance(data, dict):
                for mime in list(data):
                    if isinstance(data[mime], (str, list)):
                        data[mime], h = scrub(data[mime])
                        hit |= h
            changed += hit
    return changed
