"""Mutants of 03_mixed_precision (see tests/mutants/__init__.py): what learners get wrong with
autocast and GradScaler. Sources: the PyTorch AMP docs and examples (clip after unscale_, one
update per step, the loss inside autocast), the deprecated torch.cuda.amp API, forum threads on
"No inf checks were recorded" and on a GradScaler created inside the training step, issue 14."""
from mutants import Mutant

_VANISH = "    vanished = ((grads.float() * scale).to(torch.float16) == 0) & nonzero"
_AC = "    with torch.autocast(device_type=device.type, dtype=dtype, enabled=dtype != torch.float32):"
_FWD = _AC + """
        outputs = model(inputs)
        loss = loss_fn(outputs, targets)
    return loss"""
_UF = ("test_fp16_underflow_fraction", "test_fp16_underflow_fraction_hidden")
_FL = ("test_forward_loss", "test_forward_loss_hidden")
_AS = ("test_amp_step", "test_amp_step_hidden")

MUTANTS = [
    Mutant(
        id="underflow_counts_zeros", cell="fp16_underflow_fraction",
        find="    return int(vanished.sum()) / n_nonzero",
        replace="    return float(((grads.float() * scale).to(torch.float16) == 0).float().mean())",
        lose=_UF, says="nonzero", klass=0,
        why="divides by every value, zeros included, and counts the zeros that were zero already"),
    Mutant(
        id="underflow_scale_after_cast", cell="fp16_underflow_fraction", find=_VANISH,
        replace="    vanished = ((grads.to(torch.float16).float() * scale) == 0) & nonzero",
        lose=_UF, says="before converting", klass=0,
        why="converts to fp16 first and scales afterwards: the scale cannot rescue anything"),
    Mutant(
        id="underflow_threshold", cell="fp16_underflow_fraction", find=_VANISH,
        replace="    vanished = ((grads.float() * scale).abs() < 2.0**-24) & nonzero",
        lose=("test_fp16_underflow_fraction_hidden",), says="round", klass=2,
        why="compares with fp16's smallest subnormal instead of converting: values in (2^-25, 2^-24) round up, not to 0"),
    Mutant(
        id="underflow_tensor", cell="fp16_underflow_fraction",
        find="    return int(vanished.sum()) / n_nonzero", replace="    return vanished.sum() / n_nonzero",
        lose=_UF, says="Python float", klass=0, why="returns a 0-d tensor instead of a Python float"),
    Mutant(
        id="forward_cuda_hardcoded", cell="forward_loss", find=_AC,
        replace='    with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):',
        lose=_FL, says="device.type", klass=3,
        why="copies torch.autocast('cuda', ...) from a GPU tutorial: disabled with a warning on a CPU grader"),
    Mutant(
        id="forward_loss_outside", cell="forward_loss", find=_FWD,
        replace=_AC + """
        outputs = model(inputs)
    loss = loss_fn(outputs, targets)
    return loss""",
        lose=("test_forward_loss_hidden",), says="inside the autocast block", klass=2,
        why="computes the loss after the autocast block: fp32 anyway when the model ends in fp32 (MLP), "
            "16-bit with a Linear head (AMP docs: losses belong inside autocast)"),
    Mutant(
        id="forward_model_converted", cell="forward_loss", find=_FWD,
        replace="""    if dtype != torch.float32:
        model.to(dtype)
        inputs = inputs.to(dtype)
    return loss_fn(model(inputs).float(), targets)""",
        lose=_FL, says="do not convert the model", klass=0,
        why="converts the model and batch to 16 bits instead of autocast (pure bf16 is section 6, not AMP)"),
    Mutant(
        id="forward_fp32_autocast", cell="forward_loss", find=_AC,
        replace="    with torch.autocast(device_type=device.type, dtype=dtype):",
        lose=_FL, says="enabled=False", klass=3,
        why="autocast with dtype=torch.float32: CPU autocast warns and disables itself (the text says enabled=False)"),
    Mutant(
        id="forward_deprecated_api", cell="forward_loss", find=_AC,
        replace="    with torch.cuda.amp.autocast(dtype=dtype, enabled=dtype != torch.float32):",
        lose=_FL, says="deprecated", klass=3,
        why="the old torch.cuda.amp.autocast from tutorials: FutureWarning, CUDA only, fp32 on a CPU grader"),
    Mutant(
        id="amp_own_scaler", cell="amp_step", find="    optimizer.zero_grad(set_to_none=True)\n",
        replace="    optimizer.zero_grad(set_to_none=True)\n    scaler = torch.amp.GradScaler(device.type)\n",
        lose=_AS, says="the scaler you are given", klass=5,
        why="creates a GradScaler inside the step: it starts fresh each step and the caller's never updates"),
    Mutant(
        id="amp_clip_before_unscale", cell="amp_step",
        find="""    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)""",
        replace="""    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.unscale_(optimizer)""",
        lose=_AS, says="unscale_", klass=0,
        why="clips the scaled gradients (AMP examples, 'Gradient clipping': unscale_ first)"),
    Mutant(
        id="amp_no_update", cell="amp_step", find="    scaler.update()\n", replace="",
        lose=_AS, says="scaler.update()", klass=5,
        why="forgets scaler.update(): the next step fails with GradScaler's own RuntimeError"),
    Mutant(
        id="amp_optimizer_step", cell="amp_step", find="    scaler.step(optimizer)\n",
        replace="    optimizer.step()\n",
        lose=_AS, says="scaler.step(optimizer)", klass=5,
        why="calls optimizer.step() directly: an inf step is not skipped; update() raises 'No inf checks were "
            "recorded prior to update'"),
    Mutant(
        id="amp_zero_grad_late", cell="amp_step",
        find="""    optimizer.zero_grad(set_to_none=True)
    loss = forward_loss(model, batch, loss_fn, device=device, dtype=dtype)
    scaler.scale(loss).backward()
""",
        replace="""    loss = forward_loss(model, batch, loss_fn, device=device, dtype=dtype)
    scaler.scale(loss).backward()
    optimizer.zero_grad(set_to_none=True)
""",
        lose=_AS, says="clear the gradients at the start", klass=5,
        why="zero_grad moved after backward ('reset for the next step'): GradScaler raises 'No inf checks were "
            "recorded for this optimizer', a message that names no fix"),
    Mutant(
        id="amp_float_loss", cell="amp_step", find="    return loss.item()", replace="    return float(loss)",
        lose=_AS, says="loss.item()", klass=3,
        why="float(loss) on a tensor that requires grad: torch 2.13 warns"),
    Mutant(
        id="amp_scaled_loss", cell="amp_step",
        find="""    scaler.scale(loss).backward()""",
        replace="""    loss = scaler.scale(loss)
    loss.backward()""",
        lose=_AS, says="not the scaled loss", klass=0,
        why="returns the scaled loss (S times too large)"),
    # blind round r2 (issue 33): written from the notebooks alone; it passed the hidden tests
    Mutant(id="amp_retain_graph", cell="amp_step",
           find="    scaler.scale(loss).backward()",
           replace="    scaler.scale(loss).backward(retain_graph=True)",
           lose=("test_amp_step_hidden",), says="retain_graph", klass=1,
           why="retain_graph=True keeps every saved activation alive through the optimizer step"),
    Mutant(id="autocast_cpu_hardcoded", cell="forward_loss", find=_AC,
           replace=_AC.replace("device_type=device.type", 'device_type="cpu"'),
           lose=("test_forward_loss_hidden",), says="device_type=device.type", klass=3,
           why="autocast for the CPU whatever the device: on a GPU every CUDA op stays fp32"),
    # blind round r3 (issue 33, 2026-12-03): written from the release notebook and the answer
    # cells alone, never the hidden tests; graded once before any fix
    Mutant(id='underflow_threshold_2pow24', cell='fp16_underflow_fraction',
           find='vanished = ((grads.float() * scale).to(torch.float16) == 0) & nonzero',
           replace='vanished = ((grads.float() * scale).abs() < 2.0**-24) & nonzero',
           lose=('test_fp16_underflow_fraction_hidden',),
           says='convert to torch.float16', klass=0,
           why=('blind r3, plain: compares with the smallest subnormal instead of storing in'
                ' fp16: values in (2^-25, 2^-24) round up to 2^-24 and survive')),
    Mutant(id='underflow_scales_input_inplace', cell='fp16_underflow_fraction',
           find='vanished = ((grads.float() * scale).to(torch.float16) == 0) & nonzero',
           replace='vanished = (grads.float().mul_(scale).to(torch.float16) == 0) & nonzero',
           lose=('test_fp16_underflow_fraction_hidden',),
           says='changed its input', klass=1,
           why=('blind r3, side effect: scales in place to avoid a copy; .float() on an fp32'
                " tensor and .detach() both return views of the caller's storage")),
    Mutant(id='forward_autocast_cpu_hardcoded', cell='forward_loss',
           find=('with torch.autocast(device_type=device.type, dtype=dtype, enabled=dtype !='
                 ' torch.float32):'),
           replace=('with torch.autocast(device_type="cpu", dtype=dtype, enabled=dtype != '
                    'torch.float32):'),
           lose=('test_forward_loss_hidden',),
           says='device_type=device.type', klass=3,
           why=('blind r3, portability: copies a CPU example and hard-codes '
                "device_type='cpu'")),
    Mutant(id='forward_loss_outside_autocast', cell='forward_loss',
           find=('        outputs = model(inputs)\n        loss = loss_fn(outputs, targets)'
                 '\n    return loss'),
           replace=('        outputs = model(inputs)\n    loss = loss_fn(outputs, targets)\n'
                    '    return loss'),
           lose=('test_forward_loss_hidden',),
           says='inside the autocast block', klass=2,
           why=('blind r3, unseen case: only wraps the model call in autocast; fine for '
                'MLPStack whose residual output is fp32')),
    Mutant(id='amp_step_fp16_hardcoded', cell='amp_step',
           find='loss = forward_loss(model, batch, loss_fn, device=device, dtype=dtype)',
           replace=('loss = forward_loss(model, batch, loss_fn, device=device, '
                    'dtype=torch.float16)'),
           lose=('test_amp_step_hidden',),
           says='pass the dtype you are given', klass=2,
           why=('blind r3, unseen case: writes the fp16 recipe from the docs and ignores the'
                ' dtype argument; every visible test uses fp16')),
    Mutant(id='amp_clip_only_fp16', cell='amp_step',
           find='    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n',
           replace=('    if dtype == torch.float16:  # clipping is part of the fp16 recipe\n'
                    '        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n'),
           lose=('test_amp_step_hidden',),
           says='clip_grad_norm_', klass=2,
           why=('blind r3, unseen case: believes clipping belongs to the fp16/scaler recipe '
                'and skips it for bf16 and fp32')),
    # blind round r3's written miss, caught since the question's parts are required
    Mutant(
        id='b3_written_no_scaler_overflow',
        cell='loss_scaling_answer',
        find=('clipping and the optimizer step. GradScaler skips a step whose '
              'gradients hold inf or NaN and\n'
              'halves the scale. bf16'),
        replace='clipping and the optimizer step. bf16',
        lose=('test_loss_scaling_answer',),
        says='a part the question asks for',
        klass=0,
        why=('blind round r3: leaves out what the scaler does when the scaled '
             'gradients overflow (skip the step, halve the scale)'),
    ),
    # ---------------------------------------------------------------- blind round r5 (issue 33)
    Mutant(
        id='b5_underflow_cast_before_scale',
        cell='fp16_underflow_fraction',
        find='    vanished = ((grads.float() * scale).to(torch.float16) == 0) & nonzero',
        replace='    vanished = ((grads.to(torch.float16) * scale) == 0) & nonzero',
        lose=('test_fp16_underflow_fraction', 'test_fp16_underflow_fraction_hidden'),
        says='multiply by the scale before converting',
        klass=0,
        why=(
            'blind r5: Order of operations: learners scale the fp16 values, not realising the '
            'scale must be applied before 16-bit storage.'
        ),
    ),
    Mutant(
        id='b5_fwd_loss_outside_autocast',
        cell='forward_loss',
        find='        outputs = model(inputs)\n        loss = loss_fn(outputs, targets)\n',
        replace='        outputs = model(inputs)\n    loss = loss_fn(outputs, targets)\n',
        lose=('test_forward_loss_hidden',),
        says='compute it inside the autocast block',
        klass=0,
        why=(
            'blind r5: Some guides say to run only the forward under autocast; with a residual '
            'fp32 output nothing breaks, but a 16-bit output gives a 16-bit loss.'
        ),
    ),
    Mutant(
        id='b5_fwd_casts_inputs',
        cell='forward_loss',
        find=(
            '    with torch.autocast(device_type=device.type, dtype=dtype, enabled=dtype != '
            'torch.float32):\n'
        ),
        replace=(
            '    inputs = inputs.to(dtype)  # feed the model 16-bit data\n    with '
            'torch.autocast(device_type=device.type, dtype=dtype, enabled=dtype != '
            'torch.float32):\n'
        ),
        lose=('test_forward_loss_hidden',),
        says='do not convert the batch',
        klass=0,
        why=(
            'blind r5: Learners think mixed precision means converting the data; the residual '
            'stream then runs in 16 bits instead of fp32.'
        ),
    ),
    Mutant(
        id='b5_fwd_hardcoded_cuda',
        cell='forward_loss',
        find=(
            '    with torch.autocast(device_type=device.type, dtype=dtype, enabled=dtype != '
            'torch.float32):\n'
        ),
        replace=(
            '    with torch.autocast(device_type="cuda", dtype=dtype, enabled=dtype != '
            'torch.float32):\n'
        ),
        lose=('test_forward_loss', 'test_forward_loss_hidden'),
        says="hard-coded to 'cuda'",
        klass=3,
        why=(
            "blind r5: Copied from GPU tutorials (torch.autocast('cuda')); works on the GPU, "
            'silently fp32 with a warning on a CPU.'
        ),
    ),
    Mutant(
        id='b5_amp_clip_before_unscale',
        cell='amp_step',
        find=(
            '    scaler.unscale_(optimizer)\n    '
            'torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n'
        ),
        replace=(
            '    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    '
            'scaler.unscale_(optimizer)\n'
        ),
        lose=('test_amp_matches_fp32', 'test_amp_matches_fp32_hidden'),
        says='order of the calls',
        klass=0,
        why=(
            "blind r5: The AMP examples warn about it ('Gradient clipping'); learners put "
            'clipping right after backward as in fp32 loops.'
        ),
    ),
    Mutant(
        id='b5_amp_hardcoded_fp16',
        cell='amp_step',
        find='    loss = forward_loss(model, batch, loss_fn, device=device, dtype=dtype)',
        replace=(
            '    loss = forward_loss(model, batch, loss_fn, device=device, dtype=torch.float16)'
        ),
        lose=('test_amp_step_hidden',),
        says='pass the dtype you are given',
        klass=0,
        why=(
            'blind r5: Learners associate GradScaler with fp16 and hard-code it; the visible '
            'tests only run fp16.'
        ),
    ),
    Mutant(
        id='b5_amp_loss_not_scaled',
        cell='amp_step',
        find='    scaler.scale(loss).backward()',
        replace='    loss.backward()',
        lose=('test_amp_matches_fp32', 'test_amp_matches_fp32_hidden'),
        says='scaler.scale(loss',
        klass=0,
        why=(
            'blind r5: Learners add the scaler calls around the step but keep their old '
            'loss.backward().'
        ),
    ),
    Mutant(
        id='b5_answer_bf16_precision',
        cell='loss_scaling_answer',
        find=(
            "bf16 keeps fp32's 8 exponent bits, so it has the same range and small\ngradients "
            'do not underflow; it pays with less precision (7 mantissa bits), so no scaler is\n'
            'needed.'
        ),
        replace=(
            'bf16 has more mantissa bits than fp16, so it is more precise and small\ngradients '
            'do not underflow, so no scaler is\nneeded.'
        ),
        lose=('test_loss_scaling_answer',),
        says='bf16 is more precise than fp16',
        klass=0,
        why=(
            'blind r5: Range vs precision is the classic confusion between the two 16-bit '
            'formats.'
        ),
    ),
    # blind round r7 (#33): 36 mutants over 01-06 and 08-10 written by a helper from the
    # release notebooks and the answer cells alone, never the hidden tests; graded once
    # before any fix (31/36 caught), then the five missed classes fixed; the 5 that were the
    # same edit as an earlier mutant are kept once, under the earlier id
    Mutant(
        id='r7_underflow_inplace_scale',
        cell='fp16_underflow_fraction',
        find='(grads.float() * scale).to(torch.float16)',
        replace='grads.mul_(scale).to(torch.float16)',
        lose=('test_fp16_underflow_fraction_hidden',),
        says='changed its input',
        klass=1,
        why=('blind round r7, side_effect: scales in place to avoid a copy, but grads.detach() '
             "shares storage, so the caller's gradients are multiplied by scale; invisible in the "
             'visible test, which only checks the input after the scale=1.0 call.'),
    ),
    Mutant(
        id='r7_underflow_threshold',
        cell='fp16_underflow_fraction',
        find='((grads.float() * scale).to(torch.float16) == 0) & nonzero',
        replace='((grads.float() * scale).abs() < 2.0**-24) & nonzero',
        lose=('test_fp16_underflow_fraction_hidden',),
        says="rounding is the hardware's",
        klass=2,
        why=("blind round r7, inputs: compares with fp16's smallest subnormal instead of "
             'converting, but values between 2**-25 and 2**-24 round up to 2**-24 and survive; '
             'the hand-made visible values are far from that band.'),
    ),
    Mutant(
        id='r7_autocast_cpu_hardcoded',
        cell='forward_loss',
        find='device_type=device.type',
        replace='device_type="cpu"',
        lose=('test_forward_loss_hidden',),
        says='device_type=device.type',
        klass=3,
        why=("blind round r7, device: hard-codes autocast to 'cpu' (the laptop it was written "
             'on), so on a CUDA model the matmuls silently run in fp32 and no activation memory '
             'is saved.'),
    ),
    Mutant(
        id='r7_amp_zero_grad_keeps_grads',
        cell='amp_step',
        find='optimizer.zero_grad(set_to_none=True)',
        replace='optimizer.zero_grad(set_to_none=False)',
        lose=('test_amp_step_hidden',),
        says='set_to_none=true',
        klass=1,
        why=('blind round r7, proxy: zeroes the gradients instead of freeing them (as '
             'instructed), so the whole gradient stays allocated through the forward pass and the '
             "step's peak is higher; losses and updates are identical."),
    ),
]
