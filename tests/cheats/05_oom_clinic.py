"""Cheats and classic mistakes the tests of 05_oom_clinic must reject (loaded by
tests/notebooks/test_nbgrader_pipeline.py).

Each entry is a student whose submission is the released notebook with the answer cell
``configure_job`` replaced; ``expect`` gives the points each test cell must award it.
"""

VARIANTS = {
    # The reflex the notebook is about: halve the batch until it fits, no accumulation. Under the
    # loose budget mixed precision fits first, so that test passes; under the tight budget the
    # batch is silently lowered and the sample counter shows it.
    "shrink_batch": dict(notebook="05_oom_clinic", grade_id="configure_job", expect={
        "test_configure_loose": 2, "test_configure_tight": 0, "test_configure_hidden": 0}, source='''
def configure_job(spec, budget_bytes, device):
    m = spec.effective_batch
    while m >= 1:
        config = ml.oom.JobConfig(amp=True, micro_batch=m)
        if ml.oom.fits(spec, config, budget_bytes, device=device):
            return config
        m //= 2
    raise RuntimeError("nothing fits")
'''),
    # Every technique, always: fits every budget, but checkpoints and accumulates where memory
    # is not binding.
    "everything_always": dict(notebook="05_oom_clinic", grade_id="configure_job", expect={
        "test_configure_loose": 0, "test_configure_tight": 2, "test_configure_hidden": 0}, source='''
def configure_job(spec, budget_bytes, device):
    E = spec.effective_batch
    return ml.oom.JobConfig(amp=True, checkpoint=True, micro_batch=E // 2, accumulation_steps=2)
'''),
    # A table of the visible answers: right for the notebook's job, wrong for another one.
    "hardcoded": dict(notebook="05_oom_clinic", grade_id="configure_job", expect={
        "test_configure_loose": 2, "test_configure_tight": 2, "test_configure_hidden": 0}, source='''
def configure_job(spec, budget_bytes, device):
    if budget_bytes > 10 * 2**20:
        return ml.oom.JobConfig(amp=True, micro_batch=16)
    return ml.oom.JobConfig(amp=True, checkpoint=True, micro_batch=8, accumulation_steps=2)
'''),
    # Monkeypatches the library so that every job "fits" (runs without the budget), and returns
    # the plain job: the tests reload memlab.oom before re-measuring.
    "monkeypatch": dict(notebook="05_oom_clinic", grade_id="configure_job", expect={
        "test_configure_loose": 0, "test_configure_tight": 0, "test_configure_hidden": 0}, source='''
_real_run_job = ml.oom.run_job

def _no_budget(spec, config, **kwargs):
    kwargs.pop("budget_bytes", None)
    return _real_run_job(spec, config, **kwargs)

ml.oom.run_job = _no_budget

def configure_job(spec, budget_bytes, device):
    return ml.oom.JobConfig(micro_batch=spec.effective_batch)
'''),
}
