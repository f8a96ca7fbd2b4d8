"""Mutants of 08_more_levers (see tests/mutants/__init__.py): what learners get wrong with fused
attention, LoRA, optimizer state and the optimizer step inside backward. Sources: the PyTorch
SDPA docs (an explicit mask sends the CPU to the math kernel), Hu et al. 2021 (A random, B zero,
alpha / r), the torch.optim source (state in the parameter's dtype, fp32 step counters,
Adafactor's row/column factors), the PyTorch tutorial on fusing the optimizer step into backward."""
from mutants import Mutant

_SDPA = "    return F.scaled_dot_product_attention(q, k, v, is_causal=True)"
_CA = ("test_causal_attention", "test_causal_attention_hidden")
_LO = ("test_lora_linear", "test_lora_linear_hidden")
_PS = ("test_predict_state_bytes", "test_predict_state_bytes_hidden")
_FU = ("test_fuse_optimizer_into_backward", "test_fuse_optimizer_into_backward_hidden")
_FREEZE = """        for p in self.base.parameters():
            p.requires_grad_(False)
"""
_A = "        self.A = nn.Parameter(torch.randn(rank, base.in_features, device=w.device, dtype=w.dtype) / rank)"
_HOOK = """    def step_and_free(param):
        optimizers[param].step()
        optimizers[param].zero_grad(set_to_none=True)
"""

MUTANTS = [
    Mutant(id="attn_not_causal", cell="causal_attention", find=_SDPA,
           replace="    return F.scaled_dot_product_attention(q, k, v)",
           lose=_CA, says="is_causal", klass=0,
           why="forgets is_causal: every position also attends to the future"),
    Mutant(id="attn_explicit_mask", cell="causal_attention", find=_SDPA,
           replace="""    s = q.shape[-2]
    keep = torch.ones(s, s, dtype=torch.bool, device=q.device).tril()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)""",
           lose=_CA, says="attn_mask", klass=3,
           why="builds the causal mask by hand: right output, but on the CPU SDPA falls back to the math kernel and keeps s x s"),
    Mutant(id="attn_eager", cell="causal_attention", find=_SDPA,
           replace="""    s = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    future = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    return torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ v""",
           lose=_CA, says="s x s matrix", klass=0,
           why="writes attention out as in GPT-2: correct, and exactly the quadratic memory the exercise removes"),
    Mutant(id="attn_no_grad", cell="causal_attention", find=_SDPA,
           replace="""    with torch.no_grad():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)""",
           lose=_CA, says="require grad", klass=0,
           why="wraps it in no_grad to 'save memory': nothing is saved because nothing can be trained"),
    Mutant(id="attn_scale_one", cell="causal_attention", find=_SDPA,
           replace="    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0)",
           lose=_CA, says="scale", klass=0,
           why="passes scale=1.0 thinking it is the default: the default is 1/sqrt(head_dim)"),
    Mutant(id="lora_not_frozen", cell="lora_linear", find=_FREEZE, replace="",
           lose=_LO, says="freeze", klass=0,
           why="adds A and B but leaves the base trainable: gradients and Adam state for the big weight too"),
    Mutant(id="lora_bias_trainable", cell="lora_linear", find=_FREEZE,
           replace="        self.base.weight.requires_grad_(False)\n",
           lose=_LO, says="bias", klass=0,
           why="freezes the weight only; the bias keeps training (and gets state)"),
    Mutant(id="lora_a_zero", cell="lora_linear", find=_A,
           replace="        self.A = nn.Parameter(torch.zeros(rank, base.in_features, device=w.device, dtype=w.dtype))",
           lose=("test_lora_linear",), says="A must be random", klass=0,
           why="initialises both factors at zero: the output is right at init but neither factor ever gets a gradient"),
    Mutant(id="lora_no_alpha", cell="lora_linear",
           find="        return self.base(x) + self.scale * ((x @ self.A.T) @ self.B.T)",
           replace="        return self.base(x) + (x @ self.A.T) @ self.B.T",
           lose=("test_lora_linear_hidden",), says="alpha / rank", klass=2,
           why="drops the alpha / rank scaling: invisible while B is zero"),
    Mutant(id="lora_copies_base", cell="lora_linear", find="        self.base = base\n",
           replace="        self.base = copy.deepcopy(base)\n",
           lose=_LO, says="not a copy", klass=0,
           why="deep-copies the base layer: a second copy of the frozen weight"),
    Mutant(id="state_counts_frozen", cell="predict_state_bytes",
           find="        if not p.requires_grad:\n            continue\n", replace="",
           lose=("test_predict_state_bytes_hidden",), says="trainable parameters only", klass=2,
           why="counts every parameter: frozen ones never get state"),
    Mutant(id="state_no_step", cell="predict_state_bytes",
           find="            total += 2 * p.numel() * size + 4\n",
           replace="            total += 2 * p.numel() * size\n",
           lose=_PS, says="step counter", klass=0,
           why="forgets Adam's 4-byte step tensor per parameter"),
    Mutant(id="state_fp32_always", cell="predict_state_bytes",
           find="        size = p.element_size()\n", replace="        size = 4\n",
           lose=("test_predict_state_bytes_hidden",), says="parameter's dtype", klass=2,
           why="assumes fp32 state: torch.optim keeps state in the parameter's dtype (bf16 weights: bf16 moments)"),
    Mutant(id="adafactor_full", cell="predict_state_bytes",
           find="            if p.dim() >= 2:", replace="            if False:",
           lose=_PS, says="row and column", klass=0,
           why="treats Adafactor like RMSprop: a full second moment per matrix instead of a row and a column"),
    Mutant(id="fuse_keeps_grads", cell="fuse_optimizer_into_backward", find=_HOOK,
           replace="""    def step_and_free(param):
        optimizers[param].step()
""",
           lose=_FU, says="set_to_none", klass=0,
           why="steps in the hook but never frees the gradient: same parameters, no memory saved"),
    Mutant(id="fuse_plain_register_hook", cell="fuse_optimizer_into_backward",
           find="            p.register_post_accumulate_grad_hook(step_and_free)",
           replace="            p.register_hook(lambda grad, p=p: step_and_free(p))",
           lose=_FU, says="register_post_accumulate_grad_hook", klass=0,
           why="uses Tensor.register_hook: it runs before .grad is accumulated, so the step sees no gradient"),
    Mutant(id="fuse_steps_twice", cell="fuse_optimizer_into_backward", find=_HOOK,
           replace="""    def step_and_free(param):
        optimizers[param].step()
        optimizers[param].step()
        optimizers[param].zero_grad(set_to_none=True)
""",
           lose=_FU, says="once per backward", klass=0,
           why="steps twice per backward (e.g. a leftover optimizer.step() in the hook)"),
    # blind round r2 (issue 33): written from the notebooks alone; these passed the hidden tests
    Mutant(id="lora_merged_every_forward", cell="lora_linear",
           find="        return self.base(x) + self.scale * ((x @ self.A.T) @ self.B.T)",
           replace=("        return F.linear(x, self.base.weight + self.scale * (self.B @ self.A), "
                    "self.base.bias)"),
           lose=("test_lora_linear_hidden",), says="do not build the merged", klass=1,
           why="merges W + BA in every forward: a full-size weight and its gradient every step (the "
               "benefit of LoRA lost, the proxies - trainable shapes, optimizer state - unchanged)"),
    Mutant(id="lora_factors_default_device", cell="lora_linear", find=_A,
           replace="        self.A = nn.Parameter(torch.randn(rank, base.in_features) / rank)",
           lose=("test_lora_linear_hidden",), says="device", klass=3,
           why="A on the default device in fp32: a bf16 or GPU base layer fails with a mismatch"),
    Mutant(id="attn_checkpointed_eager", cell="causal_attention", find=_SDPA,
           replace="""    import torch.utils.checkpoint as cp

    def eager(q, k, v):
        s = q.shape[-2]
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
        return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v
    return cp.checkpoint(eager, q, k, v, use_reentrant=False)""",
           lose=("test_causal_attention_hidden",), says="a checkpoint only moves it", klass=1,
           why="eager attention under a checkpoint saves little but rebuilds the s x s matrix and "
               "its gradient in backward: the step's peak is still quadratic"),
    Mutant(id="fuse_frozen_too", cell="fuse_optimizer_into_backward",
           find="""        if p.requires_grad:
            optimizers[p] = make_optimizer([p])
            p.register_post_accumulate_grad_hook(step_and_free)""",
           replace="""        optimizers[p] = make_optimizer([p])
        p.register_post_accumulate_grad_hook(step_and_free)""",
           lose=("test_fuse_optimizer_into_backward_hidden",), says="frozen", klass=2,
           why="hooks frozen parameters too (a model with a frozen layer fails); no seeded case "
               "drew a frozen layer before"),
    # blind round r3 (issue 33, 2026-12-03): written from the release notebook and the answer
    # cells alone, never the hidden tests; graded once before any fix
    Mutant(id='attn_checkpoint_eager', cell='causal_attention',
           find='return F.scaled_dot_product_attention(q, k, v, is_causal=True)',
           replace=('return torch.utils.checkpoint.checkpoint(ml.levers.eager_attention, q, '
                    'k, v, use_reentrant=False)'),
           lose=('test_causal_attention_hidden',),
           says='the attention matrix is still built', klass=0,
           why=("blind r3, proxy: gets 'saves O(s)' by checkpointing eager attention: only "
                'q, k, v are saved, but backward rebuilds the s x s matrix')),
    Mutant(id='lora_merge_each_forward', cell='lora_linear',
           find='return self.base(x) + self.scale * ((x @ self.A.T) @ self.B.T)',
           replace=('return F.linear(x, self.base.weight + self.scale * (self.B @ self.A), '
                    'self.base.bias)'),
           lose=('test_lora_linear_hidden',),
           says='merged W + B A', klass=0,
           why=('blind r3, proxy: merges B A into the weight on every forward (the inference'
                ' trick); same output, gradients only for A and B')),
    Mutant(id='lora_params_default_device', cell='lora_linear',
           find=('self.A = nn.Parameter(torch.randn(rank, base.in_features, device=w.device,'
                 ' dtype=w.dtype) / rank)\n        self.B = '
                 'nn.Parameter(torch.zeros(base.out_features, rank, device=w.device, '
                 'dtype=w.dtype))'),
           replace=('self.A = nn.Parameter(torch.randn(rank, base.in_features) / rank)\n    '
                    '    self.B = nn.Parameter(torch.zeros(base.out_features, rank))'),
           lose=('test_lora_linear_hidden',),
           says='dtype=base.weight.dtype', klass=3,
           why='blind r3, portability: creates A and B with the default device and dtype'),
    Mutant(id='lora_scale_alpha_not_over_rank', cell='lora_linear',
           find='self.rank, self.scale = rank, alpha / rank',
           replace='self.rank, self.scale = rank, alpha',
           lose=('test_lora_linear_hidden',),
           says='(alpha / rank)', klass=0,
           why=('blind r3, plain: forgets to divide alpha by the rank; invisible at '
                'initialisation because B is zero')),
    Mutant(id='state_bytes_assume_fp32', cell='predict_state_bytes',
           find='size = p.element_size()',
           replace='size = 4  # fp32 state',
           lose=('test_predict_state_bytes_hidden',),
           says="moments in the parameter's dtype", klass=3,
           why=('blind r3, portability: assumes the optimizer state is fp32 (the 8 '
                "bytes/param of Adam in fp32) whatever the weights' dtype")),
    Mutant(id='fuse_keeps_grad_refs', cell='fuse_optimizer_into_backward',
           find='    def step_and_free(param):\n        optimizers[param].step()',
           replace=('    last_grads = {}\n\n    def step_and_free(param):\n        '
                    'last_grads[param] = param.grad  # kept to log gradient norms\n        '
                    'optimizers[param].step()'),
           lose=('test_fuse_optimizer_into_backward', 'test_fuse_optimizer_into_backward_hidden'),
           says='free each gradient in its hook', klass=1,
           why=('blind r3, side effect: keeps a reference to each gradient (for logging) '
                'before freeing .grad, so the tensors stay alive')),
    # ---------------------------------------------------------------- blind round r5 (issue 33)
    Mutant(
        id='b5_attn_explicit_mask',
        cell='causal_attention',
        find='    return F.scaled_dot_product_attention(q, k, v, is_causal=True)',
        replace=(
            '    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, '
            'device=q.device).tril()\n    return F.scaled_dot_product_attention(q, k, v, '
            'attn_mask=mask)'
        ),
        lose=('test_causal_attention', 'test_causal_attention_hidden'),
        says='is_causal=True',
        klass=0,
        why=(
            'blind r5: Porting GPT-2 code keeps the explicit mask buffer; the notebook warns '
            'it costs 4*s^2 bytes.'
        ),
    ),
    Mutant(
        id='b5_attn_force_flash_backend',
        cell='causal_attention',
        find='    return F.scaled_dot_product_attention(q, k, v, is_causal=True)',
        replace=(
            '    with '
            'torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):\n  '
            '      return F.scaled_dot_product_attention(q, k, v, is_causal=True)'
        ),
        lose=('test_causal_attention_hidden',),
        says='flash has no fp32 kernel',
        klass=3,
        why=(
            "blind r5: Learners force 'the fused kernel' to be sure (notebook exercise 2 shows "
            "sdpa_kernel); it raises 'No available kernel' for fp32 on CUDA."
        ),
    ),
    Mutant(
        id='b5_lora_init_swapped',
        cell='lora_linear',
        find=(
            '        self.A = nn.Parameter(torch.randn(rank, base.in_features, '
            'device=w.device, dtype=w.dtype) / rank)\n        self.B = '
            'nn.Parameter(torch.zeros(base.out_features, rank, device=w.device, '
            'dtype=w.dtype))\n'
        ),
        replace=(
            '        self.A = nn.Parameter(torch.zeros(rank, base.in_features, '
            'device=w.device, dtype=w.dtype))\n        self.B = '
            'nn.Parameter(torch.randn(base.out_features, rank, device=w.device, dtype=w.dtype) '
            '/ rank)\n'
        ),
        lose=('test_lora_linear_hidden',),
        says='B is zeros',
        klass=0,
        why=(
            'blind r5: Either choice makes B A zero at init; Hu et al. 2021 initialise A '
            'random and B zero, which learners mix up.'
        ),
    ),
    Mutant(
        id='b5_lora_cpu_fp32_params',
        cell='lora_linear',
        find=(
            '        self.A = nn.Parameter(torch.randn(rank, base.in_features, '
            'device=w.device, dtype=w.dtype) / rank)\n        self.B = '
            'nn.Parameter(torch.zeros(base.out_features, rank, device=w.device, '
            'dtype=w.dtype))\n'
        ),
        replace=(
            '        self.A = nn.Parameter(torch.randn(rank, base.in_features) / rank)\n       '
            ' self.B = nn.Parameter(torch.zeros(base.out_features, rank))\n'
        ),
        lose=('test_lora_linear_hidden',),
        says="base weight's dtype",
        klass=3,
        why=(
            'blind r5: Factory calls default to CPU/fp32; works on a laptop, fails on CUDA or '
            'with a bf16 base layer.'
        ),
    ),
    Mutant(
        id='b5_state_assumes_fp32',
        cell='predict_state_bytes',
        find='        size = p.element_size()',
        replace='        size = 4  # fp32: 4 bytes per number',
        lose=('test_predict_state_bytes_hidden',),
        says="moments in the parameter's dtype",
        klass=0,
        why='blind r5: The table quotes bytes per fp32 parameter; learners hard-code 4.',
    ),
    Mutant(
        id='b5_state_step_in_param_dtype',
        cell='predict_state_bytes',
        find='            total += 2 * p.numel() * size + 4',
        replace='            total += 2 * p.numel() * size + size',
        lose=('test_predict_state_bytes_hidden',),
        says='4-byte step counters',
        klass=0,
        why=(
            'blind r5: Assuming all optimizer state follows the parameter dtype; only the '
            'moments do.'
        ),
    ),
    Mutant(
        id='b5_fuse_frozen_not_skipped',
        cell='fuse_optimizer_into_backward',
        find=(
            '        if p.requires_grad:\n            optimizers[p] = make_optimizer([p])\n    '
            '        p.register_post_accumulate_grad_hook(step_and_free)\n'
        ),
        replace=(
            '        optimizers[p] = make_optimizer([p])\n        '
            'p.register_post_accumulate_grad_hook(step_and_free)\n'
        ),
        lose=('test_fuse_optimizer_into_backward_hidden',),
        says='only to parameters that require grad',
        klass=0,
        why=(
            'blind r5: The PyTorch tutorial loops over model.parameters() of a fully trainable '
            'model; the contract says trainable parameters only.'
        ),
    ),
    Mutant(
        id='b5_fuse_grad_not_freed',
        cell='fuse_optimizer_into_backward',
        find='        optimizers[param].zero_grad(set_to_none=True)\n',
        replace='',
        lose=('test_fuse_optimizer_into_backward', 'test_fuse_optimizer_into_backward_hidden'),
        says='set_to_none=True',
        klass=0,
        why=(
            'blind r5: Without the usual zero_grad at the top of the loop, learners forget '
            'that someone must still clear the gradient.'
        ),
    ),
    # blind round r7 (#33): 36 mutants over 01-06 and 08-10 written by a helper from the
    # release notebooks and the answer cells alone, never the hidden tests; graded once
    # before any fix (31/36 caught), then the five missed classes fixed; the 5 that were the
    # same edit as an earlier mutant are kept once, under the earlier id
    Mutant(
        id='r7_sdpa_flash_or_math',
        cell='causal_attention',
        find='    return F.scaled_dot_product_attention(q, k, v, is_causal=True)',
        replace=('    from torch.nn.attention import SDPBackend, sdpa_kernel\n    with '
                 'sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]):  # flash, else the '
                 'reference\n        return F.scaled_dot_product_attention(q, k, v, is_causal=True)'),
        lose=('test_causal_attention_hidden',),
        says='leaves out the memory-efficient one',
        klass=3,
        why=('blind round r7, device: restricts SDPA to flash or math; on the CPU flash always '
             'applies, but on CUDA with fp32 inputs flash is unavailable and it falls back to the '
             'math kernel, which saves the s x s matrix again.'),
    ),
    Mutant(
        id='r7_state_bytes_fp32',
        cell='predict_state_bytes',
        find='size = p.element_size()',
        replace='size = 4',
        lose=('test_predict_state_bytes_hidden',),
        says="moments in the parameter's dtype",
        klass=3,
        why=('blind round r7, device: assumes 4-byte state for every parameter, but torch.optim '
             "keeps moments in the parameter's dtype, so bf16 weights get half the predicted "
             'state; the visible model is fp32.'),
    ),
    Mutant(
        id='r7_fuse_hooks_frozen',
        cell='fuse_optimizer_into_backward',
        find=('    for p in model.parameters():\n        if p.requires_grad:\n            '
              'optimizers[p] = make_optimizer([p])\n            '
              'p.register_post_accumulate_grad_hook(step_and_free)'),
        replace=('    for p in model.parameters():\n        optimizers[p] = make_optimizer([p])\n     '
                 '   p.register_post_accumulate_grad_hook(step_and_free)'),
        lose=('test_fuse_optimizer_into_backward_hidden',),
        says='a frozen layer gets neither',
        klass=2,
        why=('blind round r7, inputs: registers a hook and an optimizer on every parameter, which '
             'raises for a frozen one (a hook needs requires_grad) and returns optimizers for '
             'untrained tensors; the visible model has no frozen layer.'),
    ),
    # the 16-bit and device checks of ac42a82 (#33), each with the mistake it was written
    # for: written with the checks, development data, not a blind figure
    Mutant(
        id="dt_fuse_optimizer_on_a_copy",
        cell="fuse_optimizer_into_backward",
        find="            optimizers[p] = make_optimizer([p])\n",
        replace="            optimizers[p] = make_optimizer([p.float()])  # fp32 optimizer state\n",
        lose=("test_fuse_optimizer_into_backward_hidden",),
        says="give make_optimizer the parameter itself",
        klass=3,
        why="hands the optimizer p.float() for fp32 state: the parameter itself for an fp32 "
            "model, a copy that is no leaf (never updated) for a bf16 one",
    ),
]
