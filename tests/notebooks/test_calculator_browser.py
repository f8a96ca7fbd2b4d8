"""01's memory calculator (memlab.calculator.calculator_widget) in real JupyterLab 4 and headless
Chromium: what a learner sees, not what the Python objects say.

A tester using the widget in a browser found four defects; each is checked here:

1. layout: the bounding boxes of the controls, the chart and the summary never intersect, and no
   control label is clipped (``scrollWidth <= clientWidth``), on first render, while an
   impossible heads value is refused (a long error message), after it is fixed, and in serving
   mode;
2. first render: no dropdown is blank (the kv-heads one showed nothing: its "= heads" option had
   the value None, which ipywidgets reads as "no selection");
3. out-of-range input: a value typed into a control is either kept and used (the summary shows
   the estimate of that value) or the widget says, in visible text naming the control, what it
   did with it (batch 100000 silently became 256; sequence length 100000 becomes the slider's
   end; batch 0 is no batch at all);
4. serving mode: the controls that do not apply to serving (optimizer, attention,
   checkpointing) are disabled, with a visible reason; back in training they are enabled again.

One small notebook written into tmp_path (imports memlab, displays the calculator), not the
course: well under 2 minutes. The server, chromium and the waits are those of
tests/notebooks/test_browser.py (imported from it). Full tier (``full`` mark). Screenshots go to
artifacts/screenshots/calculator_*.png.
"""
from __future__ import annotations

import json
import re
import time

import pytest

import test_browser as tb  # tests/notebooks/test_browser.py: LabServer, chromium, waits

pytestmark = pytest.mark.full

BUDGET_S = 240          # the whole test; a normal run takes about 40-60 s on 2 loaded cores
SETTLE_S = 30           # one change to reach the kernel and come back to the page
CELL = ("import memlab as ml\nimport memlab.calculator  # noqa: F401\n\n"
        "calculator = ml.calculator.calculator_widget()\ncalculator")
TRAINING_ONLY = ("optimizer", "attention", "checkpointing")

# Boxes of the widget's parts and labels that do not fit their box (run in the page).
_LAYOUT_JS = """root => {
  const vis = e => { const r = e.getBoundingClientRect();
                     return r.width > 0 && r.height > 0
                            && getComputedStyle(e).visibility !== 'hidden'; };
  const name = e => [...e.querySelectorAll('.widget-label, .widget-label-basic')]
    .map(l => l.textContent.replace(/\u200b/g, '').trim()).find(t => t) || e.className;
  const box = (e, n) => { const r = e.getBoundingClientRect();
                          return {name: n, x: r.left, y: r.top, r: r.right, b: r.bottom}; };
  const parts = [...root.querySelectorAll(
      '.widget-slider, .widget-dropdown, .widget-checkbox, .widget-text, .widget-inline-hbox')]
    .filter(e => !e.matches('.widget-html') && !e.parentElement.closest('.widget-inline-hbox')
                 && vis(e));
  // a control cut off by a box around it that hides its overflow (the controls' column)
  const cut = [];
  for (const e of parts) {
    const r = e.getBoundingClientRect();
    for (let a = e.parentElement; a && a !== root.parentElement; a = a.parentElement) {
      if (getComputedStyle(a).overflowX === 'visible') continue;
      const q = a.getBoundingClientRect();
      if (r.left < q.left - 1 || r.right > q.right + 1) { cut.push(name(e)); break; }
    }
  }
  const boxes = parts.map(e => box(e, 'control ' + name(e)));
  root.querySelectorAll('img').forEach(e => vis(e) && boxes.push(box(e, 'chart')));
  root.querySelectorAll('.widget-html').forEach((e, i) => vis(e) && e.innerText.trim()
      && boxes.push(box(e, 'text ' + i + ': ' + e.innerText.trim().slice(0, 40))));
  const overlaps = [];
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const p = boxes[i], q = boxes[j];
    const w = Math.min(p.r, q.r) - Math.max(p.x, q.x), h = Math.min(p.b, q.b) - Math.max(p.y, q.y);
    if (w > 1 && h > 1) overlaps.push(`${p.name} x ${q.name} (${w.toFixed(0)}x${h.toFixed(0)} px)`);
  }
  const labels = '.widget-label, .widget-label-basic, .widget-label-basic span';
  const clipped = [...root.querySelectorAll(labels)]
    .filter(e => vis(e) && e.textContent.trim() && e.scrollWidth > e.clientWidth)
    .map(e => `${e.textContent.trim()} (${e.scrollWidth} > ${e.clientWidth} px)`);
  const area = root.closest('.jp-OutputArea-output') || root.parentElement;
  const rr = root.getBoundingClientRect(), ar = area.getBoundingClientRect();
  const outside = boxes.filter(p => p.r > ar.right + 1)
    .map(p => `${p.name} (right edge ${p.r.toFixed(0)} > ${ar.right.toFixed(0)} px)`);
  return {overlaps, clipped, cut, outside, width: rr.width, area: ar.width};
}"""

# The value a control shows: a slider's readout, a text box's value, a dropdown's option.
_SHOWN_JS = r"""el => { const r = el.querySelector('.widget-readout');
  if (r) return r.textContent.trim();
  const s = el.querySelector('select');
  if (s) return s.selectedIndex < 0 ? '' : s.options[s.selectedIndex].text.replace(/\s+/g, ' ')
    .trim();
  const i = el.querySelector('input'); return i ? i.value.trim() : null; }"""

# Visible texts of the widget's HTML parts (the summary and any note).
_TEXTS_JS = """root => [...root.querySelectorAll('.widget-html')]
  .filter(e => e.getBoundingClientRect().height > 0).map(e => e.innerText.trim())
  .filter(t => t)"""


def _control(widget, label: str):
    """The control (slider, dropdown, text box, checkbox) whose description is ``label``."""
    return widget.locator(
        ".widget-slider, .widget-dropdown, .widget-text, .widget-checkbox, .widget-inline-hbox",
        has=widget.page.locator(".widget-label, .widget-label-basic",
                                has_text=re.compile(rf"^\s*{re.escape(label)}\s*$"))).first


def _html(widget) -> str:
    return json.dumps(widget.evaluate(_TEXTS_JS))


def _settle(widget, before: str) -> None:
    """Wait until the widget's texts changed from ``before`` and stayed the same for 1 s (the
    change went to the kernel and back), or SETTLE_S passed (the checks then say what is
    wrong)."""
    deadline = time.monotonic() + tb._left(SETTLE_S)
    last, since = before, time.monotonic()
    while time.monotonic() < deadline:
        now = _html(widget)
        if now != last:
            last, since = now, time.monotonic()
        elif now != before and time.monotonic() - since >= 1.0:
            return
        time.sleep(0.2)


def _enter(page, widget, label: str, text: str) -> None:
    """Type ``text`` into a control as a learner does (a slider's readout or a text box), Enter."""
    control = _control(widget, label)
    before = _html(widget)
    control.locator(".widget-readout, input").first.click()
    page.keyboard.press("Control+a")
    page.keyboard.type(text)
    page.keyboard.press("Enter")
    _settle(widget, before)


def _check_layout(widget, when: str) -> None:
    got = widget.evaluate(_LAYOUT_JS)
    problems = []
    if got["overlaps"]:
        problems.append("parts overlap: " + "; ".join(got["overlaps"]))
    if got["clipped"]:
        problems.append("clipped labels: " + "; ".join(got["clipped"]))
    if got["cut"]:
        problems.append("controls cut off by their column: " + "; ".join(got["cut"]))
    if got["outside"]:
        problems.append(f"parts past the output area ({got['area']:.0f} px): {got['outside']}")
    if problems:
        widget.screenshot(path=str(tb.SHOTS / f"calculator_layout_{when.replace(' ', '_')}.png"))
    assert not problems, f"calculator layout, {when}:\n" + "\n".join(problems)


def _check_typed(widget, label: str, typed: int, want_total) -> None:
    """A typed value is kept and used, or a visible message names the control and says what
    happened. ``want_total``: the summary's total for the typed value (None: invalid value)."""
    shown = _control(widget, label).evaluate(_SHOWN_JS)
    texts = widget.evaluate(_TEXTS_JS)
    said = [str(typed)] + ([shown] if shown else [])   # the value typed or the value set
    told = [t for t in texts if label in t.lower() and any(
        re.search(rf"(?<![\d.]){re.escape(v)}(?![\d.])", t.replace(",", "")) for v in said)]
    if shown == str(typed) and want_total is not None:
        assert any(want_total in t for t in texts), (
            f"{label} shows {typed} but the summary is not its estimate ({want_total}): {texts}")
    else:
        assert told, (f"{label}: typed {typed}, the control shows {shown!r}, and no visible text "
                      f"in the widget says so (a silent change): {texts}")


def test_calculator_layout_first_render_range_and_serving(tmp_path):
    reason = tb._skip_reason()
    if reason:
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    from memlab.lessons import calculator as calc
    from memlab.measure.units import fmt_bytes

    tb._deadline[0] = time.monotonic() + BUDGET_S
    tb.SHOTS.mkdir(parents=True, exist_ok=True)
    course = tmp_path / "course"
    course.mkdir()
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "id": "calculator",
                     "metadata": {}, "outputs": [], "source": CELL}],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                      "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    (course / "calculator.ipynb").write_text(json.dumps(nb))
    server = tb.LabServer(course, tmp_path)
    try:
        server.wait_ready()
        with sync_playwright() as pw:
            browser = pw.chromium.launch_persistent_context(
                str(tmp_path / "chromium-profile"), executable_path=tb.CHROMIUM, headless=True,
                args=tb.CHROMIUM_ARGS, viewport={"width": 1400, "height": 1000})
            try:
                page = browser.pages[0] if browser.pages else browser.new_page()
                page.set_default_timeout(tb._ms())
                tb._open_and_run_all(page, server, "calculator.ipynb", 1)
                _use(page, calc, fmt_bytes)
            finally:
                browser.close()
    except BaseException:
        print("---- JupyterLab log (tail) ----\n" + server.log_tail())
        raise
    finally:
        server.stop()
        tb._deadline[0] = float("inf")


def _use(page, calc, fmt_bytes) -> None:
    widget = page.locator(".widget-vbox:has(.widget-image)").first
    image = widget.locator("img").first
    page.wait_for_function("el => el.src && el.naturalWidth > 0", arg=image.element_handle())
    widget.scroll_into_view_if_needed()
    widget.screenshot(path=str(tb.SHOTS / "calculator_first_render.png"))

    # 2. no blank dropdown on first render (the kv-heads one was)
    for label in ("kv heads", "precision", "optimizer", "attention"):
        shown = _control(widget, label).evaluate(_SHOWN_JS)
        assert shown, f"the {label!r} dropdown is blank on first render"
    assert _control(widget, "kv heads").evaluate(_SHOWN_JS).startswith("= heads")
    _check_layout(widget, "first render")

    # 1. an impossible heads value: refused with a message, and the layout holds
    _enter(page, widget, "heads", "7")
    assert any("No such model" in t for t in widget.evaluate(_TEXTS_JS)), "heads=7 not refused"
    widget.screenshot(path=str(tb.SHOTS / "calculator_heads7.png"))
    _check_layout(widget, "heads 7 refused")
    _enter(page, widget, "heads", "32")
    assert not any("No such model" in t for t in widget.evaluate(_TEXTS_JS))
    _check_layout(widget, "heads back to 32")

    # 3. out-of-range values: kept and used, or the learner is told
    base = {"batch": 1, "seq_len": 2048}
    for label, key, typed in (("batch size", "batch", 100000), ("batch size", "batch", 0),
                              ("sequence length", "seq_len", 100000)):
        _enter(page, widget, label, str(typed))
        try:
            want = fmt_bytes(calc.estimate(**dict(base, **{key: typed}))["total"])
        except ValueError:
            want = None
        widget.screenshot(path=str(tb.SHOTS / f"calculator_{key}_{typed}.png"))
        _check_typed(widget, label, typed, want)
        _check_layout(widget, f"{key} {typed}")
        _enter(page, widget, label, str(base[key]))
        assert _control(widget, label).evaluate(_SHOWN_JS) == str(base[key])

    # 4. serving: the training-only controls are disabled, with a visible reason
    serving = _control(widget, "serving (weights + KV cache)")
    before = _html(widget)
    serving.locator("input").first.check()
    _settle(widget, before)
    assert any("kv cache" in t for t in widget.evaluate(_TEXTS_JS)), "serving: no kv cache row"
    widget.screenshot(path=str(tb.SHOTS / "calculator_serving.png"))
    enabled = [label for label in TRAINING_ONLY
               if not _control(widget, label).locator("select, input").first.is_disabled()]
    assert not enabled, f"serving mode: controls that do not apply are enabled: {enabled}"
    texts = widget.evaluate(_TEXTS_JS)
    reason = [t for t in texts if "serving" in t.lower()
              and all(label in t.lower() for label in TRAINING_ONLY)]
    assert reason, f"serving mode: no visible reason names the disabled controls: {texts}"
    _check_layout(widget, "serving")
    before = _html(widget)
    serving.locator("input").first.uncheck()
    _settle(widget, before)
    disabled = [label for label in TRAINING_ONLY
                if _control(widget, label).locator("select, input").first.is_disabled()]
    assert not disabled, f"training mode: controls still disabled: {disabled}"
    assert not [t for t in widget.evaluate(_TEXTS_JS)
                if all(label in t.lower() for label in TRAINING_ONLY)], "the serving note stays"
    _check_layout(widget, "training again")

    # 1 again, in a narrow notebook (a laptop with the file browser open): the chart goes under
    # the controls, not over them, with and without a long message
    page.set_viewport_size({"width": 900, "height": 1000})
    page.wait_for_timeout(500)
    _check_layout(widget, "narrow")
    _enter(page, widget, "heads", "7")
    widget.screenshot(path=str(tb.SHOTS / "calculator_narrow_heads7.png"))
    _check_layout(widget, "narrow, heads 7 refused")
    _enter(page, widget, "heads", "32")
    _check_layout(widget, "narrow, heads back to 32")
