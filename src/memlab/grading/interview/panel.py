"""Assignment 07 "Interview prep", part 2 of 3: the self-study widgets.

:class:`SelfCheck` (one question: type an answer, check it, and only then reveal the model
answer or the worked solution) and :class:`StudyPanel` (a dropdown over all questions,
``ml.interview.study_panel()``), built with ipywidgets, which is imported only when a
widget is made (the autograder never makes one).

Used by: the self-study section of notebooks/07_interview_prep, through the facade
:mod:`memlab.grading.interview` (``ml.interview.study_panel()`` / ``ml.interview.self_check``).
It imports the question bank (:mod:`memlab.grading.interview.bank`: questions, topics and
the practice variants it checks attempts with); the bank never imports it.

"Reveal only after trying" is enforced in the widget (the reveal button stays disabled and
its handler refuses until a non-empty answer was checked), not against a learner who calls
the functions directly: practice keys are not secret (see the bank's docstring).
"""
from __future__ import annotations

import html

from memlab.grading.interview.bank import (QUESTIONS, TOPICS, Practice, _example, _question,
                                           practice)

__all__ = ["SelfCheck", "StudyPanel", "self_check", "study_panel"]


def _pre(text: str) -> str:
    return f"<pre style='white-space: pre-wrap'>{html.escape(text)}</pre>"


def _prompt_html(p: Practice) -> str:
    head = "Practice variant" if p.kind != "text" else "Graded question (its rubric is public)"
    body = f"<b>{head}</b> ({p.kind}{', answer in ' + p.unit if p.unit else ''}): " \
           f"{html.escape(p.prompt)}"
    if p.options:
        body += "<ul>" + "".join(f"<li><b>{k}</b>) {html.escape(v)}</li>"
                                 for k, v in p.options.items()) + "</ul>"
    return body


def _placeholder(q) -> str:
    """An example in the unit the question asks for (a GiB question never suggests "12 GB")."""
    return _example(q).strip('"')


def _key_text(p: Practice) -> str:
    if p.kind == "text":
        return ""
    if p.kind == "numeric":
        return f"Answer: {p.key:g} {p.unit}".rstrip() + "\n"
    if p.kind == "choice":
        return f"Answer: {p.key}\n"
    return f"Answer: {(' > ' if p.kind == 'ordering' else ', ').join(p.key)}\n"


class SelfCheck:
    """The self-study widget of one question: type an answer, check it, and only then reveal
    the model answer (text) or the worked solution (practice variant).

    ``.widget`` is the ipywidgets box (displayed when this object is the cell's value);
    ``.answer``, ``.check_button``, ``.reveal_button``, ``.new_button``, ``.feedback`` and
    ``.solution`` are its parts. Used by 07's self-study section.
    """

    def __init__(self, qid: str, seed: int | None = None):
        import ipywidgets as w

        self.question = _question(qid)
        self._seed = seed if seed is not None else 0
        self.attempted = False
        multiline = self.question.kind == "text"
        self.answer = (w.Textarea(placeholder="your answer, in your own words",
                                  layout=w.Layout(width="95%", height="8em")) if multiline
                       else w.Text(placeholder=_placeholder(self.question),
                                   layout=w.Layout(width="60%")))
        self.prompt = w.HTML()
        self.check_button = w.Button(description="Check", button_style="primary")
        self.hint_button = w.Button(description="Hint", disabled=True,
                                    tooltip="available after a wrong attempt")
        self.reveal_button = w.Button(description="Reveal answer", disabled=True,
                                      tooltip="available after you have checked an answer")
        # numeric practice draws new sizes; the other kinds have one written variant
        self.new_button = w.Button(description="New variant",
                                   disabled=self.question.kind != "numeric")
        self.feedback = w.HTML()
        self.solution = w.HTML()
        self.check_button.on_click(lambda _: self.check())
        self.hint_button.on_click(lambda _: self.show_hint())
        self.reveal_button.on_click(lambda _: self.reveal())
        self.new_button.on_click(lambda _: self.new_variant())
        self.widget = w.VBox([self.prompt, self.answer,
                              w.HBox([self.check_button, self.hint_button, self.reveal_button,
                                      self.new_button]),
                              self.feedback, self.solution])
        self._load(self._seed)

    def _load(self, seed: int) -> None:
        self.item = practice(self.question.id, seed)
        self.attempted = False
        self.reveal_button.disabled = self.hint_button.disabled = True
        self.answer.value = ""
        self.feedback.value = self.solution.value = ""
        self.prompt.value = (f"<h4>{self.question.id.upper()} · {TOPICS[self.question.topic]}"
                             f"</h4>{_prompt_html(self.item)}")

    def check(self) -> None:
        """Grade what is typed; a non-empty attempt unlocks the reveal button."""
        value = self.answer.value
        if not value.strip():
            self.feedback.value = _pre("type an answer first")
            return
        # a wrong attempt gets its feedback without the key: a hint first, the key on request
        result = self.item.check(value, reveal=False)
        self.feedback.value = _pre(result.report())
        self.attempted = True
        self.reveal_button.disabled = False
        self.hint_button.disabled = result.score >= 1.0

    def show_hint(self) -> None:
        """The method of the worked solution without its result (after a wrong attempt)."""
        if not self.attempted:
            self.solution.value = _pre("check an answer of your own first")
            return
        self.solution.value = _pre("Hint: " + self.item.hint + "\n(Reveal answer shows the key.)")

    def reveal(self) -> None:
        """Show the model answer / worked solution, only after an attempt."""
        if not self.attempted:
            self.solution.value = _pre("check an answer of your own first")
            return
        note = ("" if self.item.kind != "text" else
                "\n\n(Graded answers that copy this wording are flagged for the instructor.)")
        self.solution.value = _pre(_key_text(self.item) + self.item.worked + note)

    def new_variant(self) -> None:
        """Another practice variant (numeric questions draw new sizes)."""
        self._seed += 1
        self._load(self._seed)

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)


def self_check(qid: str, seed: int | None = None) -> SelfCheck:
    """The self-study widget for question ``qid``: ``ml.interview.self_check("q9")``."""
    return SelfCheck(qid, seed)


class StudyPanel:
    """One panel for all questions: a dropdown picks the question, below it its
    :class:`SelfCheck`. Used by 07's self-study section (``ml.interview.study_panel()``)."""

    def __init__(self, qid: str = "q1"):
        import ipywidgets as w

        labels = [(f"{q.id.upper()} · {q.kind} · {q.title}", q.id) for q in QUESTIONS.values()]
        self.dropdown = w.Dropdown(options=labels, value=_question(qid).id,
                                   description="Question", layout=w.Layout(width="70%"))
        self.current = SelfCheck(qid)
        self.widget = w.VBox([self.dropdown, self.current.widget])
        self.dropdown.observe(lambda change: self.select(change["new"]), names="value")

    def select(self, qid: str) -> None:
        if qid != self.current.question.id:
            self.current = SelfCheck(qid)
            self.widget.children = [self.dropdown, self.current.widget]
        if self.dropdown.value != qid:
            self.dropdown.value = qid

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)


def study_panel(qid: str = "q1") -> StudyPanel:
    """The self-study panel of 07 (all questions, one at a time)."""
    return StudyPanel(qid)
