"""What each assignment needs of the grader, in one place: one :class:`Assignment` per folder of
solutions/ (tests/grading/test_assignments.py fails when one is missing or names something that
does not exist).

Data only, imports nothing: the guard reads it in the learner's kernel (the helpers graded tests
call), and the instructor's side reads the rest (memlab.autograde: the static audit's forbidden
helpers, the report's extra reviews). Nothing here is secret: the course's source is public,
and a learner who reads that ``count_param_bytes`` must not call ``memlab.param_bytes`` learns
what the exercise says anyway.

Names are dotted as a notebook writes them (``memlab.levers.sdpa_attention``, with the short
names of ``memlab.MODULES``); the audit resolves every alias to the module that defines it, so
``memlab.lessons.levers.sdpa_attention`` is the same helper.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping


@dataclass(frozen=True)
class Assignment:
    name: str
    # the lesson module of its notebook (a short name of memlab.MODULES), if it has one
    lesson: str | None = None
    # rubric ids of memlab.grading.answers.bank its written answers are graded with
    rubrics: tuple[str, ...] = ()
    # grade_id -> dotted helpers whose computation IS that exercise's answer (the audit)
    forbidden: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # helpers forbidden in every answer cell of the assignment (the audit)
    forbidden_everywhere: tuple[str, ...] = ()
    # helpers its graded tests call to measure or compare: the guard checks they are intact
    guard_helpers: tuple[str, ...] = ()
    # "module:function" hooks the class report runs on each graded notebook of the assignment;
    # each returns a list of review reasons (memlab.autograde.batch.report)
    report_hooks: tuple[str, ...] = ()
    # test grade_id -> the learner's names it calls: the test cells decided by the judge, in a
    # process that runs no learner code (memlab.autograde.security.judge); every argument and
    # result of those names is plain data (memlab.autograde.security.channel). A test cell not
    # named here is decided in the re-run beside the learner's code (autograder/README.md).
    judged: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


_COUNTERS = ("memlab.param_bytes", "memlab.grad_bytes", "memlab.optimizer_state_bytes",
             "memlab.saved_activation_bytes", "memlab.SavedActivations",
             "memlab.training_step_breakdown")
_ESTIMATORS = ("memlab.calculator.estimate", "memlab.calculator.layer_activation_bytes",
               "memlab.estimate_training_step", "memlab.estimate.estimate_training_step")


def _judged(*functions: str) -> dict[str, tuple[str, ...]]:
    """Both test cells (visible and hidden) of each function, judged outside the learner's
    process (``Assignment.judged``)."""
    return {f"test_{f}{tail}": (f,) for f in functions for tail in ("", "_hidden")}


# the clean regrade of written answers outside the learner's kernel (memlab.autograde.review)
_WRITTEN = ("memlab.autograde.review:answers_audit",)

ASSIGNMENTS: dict[str, Assignment] = {a.name: a for a in (
    Assignment("00_setup", forbidden={"tensor_bytes": ("memlab.storage_bytes",)},
               judged=_judged("tensor_bytes")),
    Assignment(
        "01_where_memory_goes", lesson="calculator", report_hooks=_WRITTEN,
        rubrics=("peak_moves", "bytes_conventions"),
        forbidden={
            "count_param_bytes": ("memlab.param_bytes",),
            "count_grad_bytes": ("memlab.grad_bytes",),
            "count_optimizer_state_bytes": ("memlab.optimizer_state_bytes",),
            "count_saved_activation_bytes": ("memlab.saved_activation_bytes",
                                             "memlab.SavedActivations"),
            "predict_training_bytes": _ESTIMATORS + ("memlab.training_step_breakdown",),
        },
        forbidden_everywhere=("memlab.training_step_breakdown",)),
    Assignment("02_checkpointing", lesson="checkpointing", rubrics=("checkpointing_cost",),
               report_hooks=_WRITTEN,
               forbidden={"predict_ratio": ("memlab.formulas.chen_segment_cost",),
                          "choose_segments": ("memlab.formulas.optimal_segments",)},
               judged=_judged("choose_segments")),
    Assignment("03_mixed_precision", lesson="amp", rubrics=("fp16_loss_scaling",),
               report_hooks=_WRITTEN, judged=_judged("fp16_underflow_fraction")),
    Assignment("04_accumulation", lesson="accumulation", rubrics=("accumulation_equivalence",),
               report_hooks=_WRITTEN,
               forbidden_everywhere=("memlab.accumulation.full_batch_gradients",)),
    Assignment("05_oom_clinic", lesson="oom", rubrics=("oom_before_batch",),
               report_hooks=_WRITTEN,
               forbidden={"configure_job": ("memlab.oom.reference", "memlab.oom.clinic_budgets")},
               judged={f"test_configure_{k}": ("configure_job",)
                       for k in ("loose", "tight", "hidden")}),
    Assignment("06_sharding", lesson="distributed", rubrics=("sharding_when_why",),
               report_hooks=_WRITTEN, judged=_judged("predict_rank_bytes"),
               forbidden={"predict_rank_bytes": (
                   "memlab.distributed._fsdp_rows", "memlab.distributed._zero1_owner",
                   "memlab.distributed.launch", "memlab.distributed._one_step",
                   "memlab.distributed._wrap", "memlab.distributed.local_bytes",
                   "memlab.formulas.zero_bytes_per_device")}),
    Assignment("07_interview_prep", lesson="interview",
               rubrics=("accumulation_equivalence", "activations_scaling", "allocated_vs_reserved",
                        "checkpointing_cost", "fp16_loss_scaling", "kv_cache_tradeoff",
                        "oom_before_batch", "sharding_when_why"),
               # Q34's message is read by hand: 10's reader and its verdict are its answer
               forbidden_everywhere=_ESTIMATORS + _COUNTERS + (
                   "memlab.formulas", "memlab.rubric", "memlab.debugging.read_oom_message",
                   "memlab.debugging.diagnose"),
               report_hooks=_WRITTEN),
    Assignment(
        "08_more_levers", lesson="levers",
        forbidden={"causal_attention": ("memlab.levers.sdpa_attention",),
                   "predict_state_bytes": ("memlab.levers.state_bytes_after_step",)},
        guard_helpers=(
            "memlab.lessons.levers.eager_attention", "memlab.lessons.levers.state_bytes_after_step",
            "memlab.lessons.levers.make_optimizer", "memlab.lessons.levers.train_plain",
            "memlab.lessons.levers.train_steps", "memlab.lessons.levers.step_peak",
            "memlab.lessons.levers.max_abs_param_diff")),
    # the calculator's serving row is the KV cache formula these two exercises ask for (the
    # module, not its function names: a string saying "estimate" in an answer stays fine)
    Assignment(
        "09_serving_memory", lesson="serving",
        forbidden={"kv_cache_bytes": ("memlab.calculator",), "max_batch": ("memlab.calculator",)},
        guard_helpers=("memlab.lessons.serving.generate", "memlab.lessons.serving.cache_bytes",
                       "memlab.lessons.serving.decode_peak", "memlab.lessons.serving.TinyDecoder"),
        judged=_judged("kv_cache_bytes", "max_batch")),
    # read right after 05; the library's reader, readers and chunked loss are the three answers
    Assignment(
        "10_debugging_memory", lesson="debugging",
        forbidden={
            "read_oom": ("memlab.debugging.read_oom_message", "memlab.debugging.diagnose",
                         "memlab.debugging.parse_cuda_size", "memlab.debugging.OomReport"),
            "peak_report": (
                "memlab.snapshot.live_at_peak", "memlab.snapshot.largest_allocation",
                "memlab.snapshot.peak_live_bytes", "memlab.snapshot.live_bytes_timeline",
                "memlab.snapshot.allocations"),
            "chunked_lm_loss": ("memlab.debugging.chunked_cross_entropy",),
        },
        guard_helpers=(
            "memlab.lessons.debugging.format_oom_message",
            "memlab.lessons.debugging.read_oom_message",
            "memlab.lessons.debugging.lm_head_cross_entropy",
            "memlab.lessons.debugging.logits_bytes",
            "memlab.measure.snapshot.record_snapshot", "memlab.measure.snapshot.live_at_peak",
            "memlab.measure.snapshot.peak_live_bytes", "memlab.measure.snapshot.user_frame")),
)}


def guard_helpers() -> tuple[str, ...]:
    """Every assignment's guard helpers, in registry order."""
    return tuple(h for a in ASSIGNMENTS.values() for h in a.guard_helpers)
