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
* cell attachments other than images dropped.
"""

from __future__ import annotations

__all__ = ["sanitize_notebook", "clean_html", "KEPT_MIMETYPES"]

# Rendered as data or escaped text by nbconvert's templates: safe to keep as they are.
KEPT_MIMETYPES = frozenset({"text/plain", "image/png", "image/jpeg", "image/gif", "image/webp"})
_CLEANED = frozenset({"text/html", "text/markdown"})


def clean_html(html: object) -> str:
    """``html`` with nothing that runs: nh3's allow-list of tags and attributes."""
    import nh3

    text = "".join(html) if isinstance(html, list) else str(html)
    return nh3.clean(text)


def _clean_output(out: dict) -> int:
    changed = 0
    data = out.get("data")
    if isinstance(data, dict):
        for mime in list(data):
            if mime in _CLEANED:
                before = data[mime]
                data[mime] = clean_html(before)
                changed += data[mime] != ("".join(before) if isinstance(before, list) else before)
            elif mime not in KEPT_MIMETYPES:
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
        if cell.cell_type in ("markdown", "raw") and cell.source not in release_sources:
            cleaned = clean_html(cell.source)
            if cleaned != cell.source:
                cell.source = cleaned
                changed += 1
        attachments = cell.get("attachments")
        if isinstance(attachments, dict):
            for name in list(attachments):
                kinds = attachments[name] if isinstance(attachments[name], dict) else {}
                if not kinds or any(
                    not str(k).startswith("image/") or k == "image/svg+xml" for k in kinds
                ):
                    del attachments[name]
                    changed += 1
    return changed
