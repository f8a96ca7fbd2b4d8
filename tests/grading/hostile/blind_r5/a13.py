"""a13, written by the round's helper as a 13 MB patch; stored as the script that writes the
same patch (test_hostile_blind.py runs ``patch()`` where no JSON is):
60,000 markdown cells after the release's, each with tags that are not a list and an
unknown grade cell id."""

RELEASE = ["intro", "setup", "formats-intro", "formats-table", "formats-read", "formats-cast", "formats-gradients", "formats-histogram", "underflow-exercise", "fp16_underflow_fraction", "test_fp16_underflow_fraction", "test_fp16_underflow_fraction_hidden", "underflow-use", "underflow-table", "underflow-read", "autocast-intro", "autocast-ops", "autocast-read", "forward_loss", "test_forward_loss", "test_forward_loss_hidden", "autocast-memory", "autocast-measure", "autocast-why", "scaler-intro", "scaler-zero-grads", "scaler-recipe", "amp-step-exercise", "amp_step", "test_amp_step", "test_amp_step_hidden", "scaler-watch", "scaler-history", "scaler-read", "loss-curves", "loss-curves-read", "test_amp_matches_fp32", "test_amp_matches_fp32_hidden", "scaler-exercises", "bf16-intro", "bf16-gradients", "bf16-scaler-error", "bf16-scaler-try", "decision-table", "written-question", "loss_scaling_answer", "test_loss_scaling_answer", "bf16-exercises", "old-code", "old-code-warnings", "old-code-exercises", "pure-intro", "pure-memory", "pure-precision", "pure-stagnation", "pure-read", "you-can-now", "exercises"]


def patch() -> dict:
    cells = [{"release": gid} for gid in RELEASE]
    cells += [{"cell_type": "markdown",
               "metadata": {"tags": i, "nbgrader": {"grade_id": f"bonus_{i:05d}_" + "x" * 30,
                                                    "grade": True, "points": 5}},
               "source": "."} for i in range(60_000)]
    return {"cells": cells}
