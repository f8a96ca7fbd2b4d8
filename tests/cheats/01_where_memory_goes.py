"""Mistakes and cheats the tests of 01_where_memory_goes must reject (loaded by
tests/notebooks/test_nbgrader_pipeline.py).

Each entry is a student whose submission is the released notebook with one answer cell
replaced; ``expect`` gives the points each test cell must award it. More variants were run once
by hand with the same machinery (nbgrader autograde in a temporary course) and scored as they
should: gradients assumed to equal the parameters once any exists (visible 1, hidden 0), an
``int`` subclass whose ``==`` is always true in ``predict_training_bytes`` (0, 0), and, in-process,
``4 * numel`` instead of ``element_size()`` in each counter, no storage de-duplication, excluding
only ``nn.Parameter`` instances (a Linear saves ``weight.t()``, a view), the tied embedding counted
twice, the logits or the attention matrix left out of the prediction, and fp32 optimizer state for
bf16 parameters (all fail the hidden tests). They are left out here to keep ``make test`` short
(each variant is one more autograde, ~10 s).
"""

VARIANTS = {
    # Summing state_dict(): counts BatchNorm's buffers and the tied embedding twice.
    "state_dict_params": dict(notebook="01_where_memory_goes", grade_id="count_param_bytes", expect={
        "test_count_param_bytes": 0, "test_count_param_bytes_hidden": 0}, source='''
def count_param_bytes(model):
    return int(sum(t.numel() * t.element_size() for t in model.state_dict().values()))
'''),
    # Adam's state reported from the parameters, whether or not step() has run.
    "adam_state_before_step": dict(notebook="01_where_memory_goes", grade_id="count_optimizer_state_bytes",
                                   expect={"test_count_optimizer_state_bytes": 0,
                                           "test_count_optimizer_state_bytes_hidden": 0}, source='''
def count_optimizer_state_bytes(optimizer):
    n_bytes = sum(p.numel() * p.element_size() for g in optimizer.param_groups for p in g["params"])
    return 2 * n_bytes if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)) else 0
'''),
    # Module outputs (forward hooks) instead of what autograd saves.
    "module_outputs": dict(notebook="01_where_memory_goes", grade_id="count_saved_activation_bytes", expect={
        "test_count_saved_activation_bytes": 0, "test_count_saved_activation_bytes_hidden": 0}, source='''
def count_saved_activation_bytes(fn, model):
    total = [0]
    def hook(module, inputs, output):
        if torch.is_tensor(output):
            total[0] += output.numel() * output.element_size()
    handles = [m.register_forward_hook(hook) for m in model.modules()]
    fn()
    for handle in handles:
        handle.remove()
    return int(total[0])
'''),
    # "Predicting" by building the model and measuring it: exact, but it allocates.
    "predict_by_measuring": dict(notebook="01_where_memory_goes", grade_id="predict_training_bytes", expect={
        "test_predict_training_bytes": 2, "test_predict_training_bytes_hidden": 0}, source='''
def predict_training_bytes(config):
    model = ml.models.TinyGPT(vocab=config["vocab"], hidden=config["hidden"], heads=config["heads"],
                              layers=config["layers"], max_seq=config["max_seq"]).to(device=device, dtype=config["dtype"])
    if config["optimizer"] == "adamw":
        optimizer = torch.optim.AdamW(model.parameters())
    else:
        momentum = 0.9 if config["optimizer"] == "sgd_momentum" else 0.0
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=momentum)
    ids = torch.randint(0, config["vocab"], (config["seq_len"], config["batch"]), device=device)
    report = ml.training_step_breakdown(model, (ids, ids), loss_fn, optimizer, device=device, timeline=False)
    return report.as_dict()
'''),
    # Copying the calculator's answer key instead of predicting: the visible test cannot tell,
    # the hidden test refuses it.
    "predict_with_calculator": dict(notebook="01_where_memory_goes", grade_id="predict_training_bytes", expect={
        "test_predict_training_bytes": 2, "test_predict_training_bytes_hidden": 0}, source='''
import memlab.lessons.calculator

def predict_training_bytes(config):
    precision = "fp32" if config["dtype"] == torch.float32 else "bf16"
    result = memlab.calculator.estimate({k: v for k, v in config.items() if k != "dtype"},
                                        precision=precision, dropout=False, attention="eager")
    return {k: v for k, v in result.items() if k not in ("total", "kv cache")}
'''),
    # A keyword list instead of an answer: the rubric must give it nothing.
    "keyword_answer": dict(notebook="01_where_memory_goes", grade_id="answer_peak", expect={
        "test_answer_peak": 0}, source='''
answer_peak = """activations batch size gradients optimizer state temporaries forward backward peak parameters"""
'''),
}
