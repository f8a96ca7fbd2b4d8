"""Tests for memlab.grading.answers.grade (answer grading) and memlab.grading.answers.bank (the course rubrics).

The labelled answers below pin each rubric's behaviour: every answer must land in its
category's score band. They are written the way learners write (several phrasings, some
terse, some chatty), not to fit the patterns; when a rubric change moves one out of its
band, fix the rubric, not the label.
"""
from __future__ import annotations

import dataclasses
import random
import warnings

import pytest

from memlab.grading.answers import grade as rb
from memlab.grading.answers.grade import (
    Concept, Misconception, Result, Rubric, grade_choice, grade_numeric, grade_ordering,
    grade_text, normalize, parse_quantity,
)
from memlab.grading.answers.bank import RUBRICS

BANDS = {
    "strong": (0.9, 1.0),
    "partial": (0.3, 0.7),
    "wrong": (0.0, 0.2),
    "stuffed": (0.0, 0.2),
    "offtopic": (0.0, 0.0),
    "empty": (0.0, 0.0),
    "copied": (0.0, 0.2),
    # strong answers strung together: graded on their content less the length's cost, or 0
    # where the repetition reads as a keyword list
    "overlength": (0.0, 0.9),
}
EMPTY = ["", "   ", "\n\t  \n", "YOUR ANSWER HERE"]

OOM = {
    "strong": [
        "Before touching the batch size I'd switch to mixed precision with bf16 autocast, which "
        "roughly halves the memory taken by activations. Next I'd turn on gradient "
        "checkpointing so most activations are recomputed in the backward pass instead of stored; "
        "that costs extra compute but frees a lot of memory. If it still doesn't fit, gradient "
        "accumulation over several micro-batches keeps the effective batch size the same. "
        "Shrinking the batch is the last resort because it changes the training dynamics and "
        "leaves the GPU underutilized.",

        "First thing: mixed precision (fp16 with a GradScaler, or bf16). Activations and grads "
        "take 2 bytes instead of 4, so that memory is about cut in half. Second: activation "
        "checkpointing, i.e. keep only some layer inputs and recompute the rest during backprop, "
        "trading roughly 30% more compute for much less activation memory. Third: gradient "
        "accumulation, so I can run smaller micro-batches but still step with the same effective "
        "batch. I could also use an 8-bit optimizer or shard optimizer states with ZeRO/FSDP. "
        "Only if none of that works would I reduce the batch, since that hurts GPU utilization "
        "and may need the learning rate retuned.",

        "I would not reduce the batch size straight away, because a smaller batch makes the "
        "gradients noisier, changes how training converges and uses the GPU less efficiently. "
        "Instead I would train in half precision (bf16 or fp16 mixed precision), which halves "
        "the size of the activations. I would also use gradient checkpointing: the "
        "model throws away intermediate activations and recalculates them when backward needs "
        "them, so it is slower but uses far less memory. Finally, accumulating gradients over a "
        "few smaller batches gives the same effective batch size.",

        "1. bf16 mixed precision - activations/grads in 16 bit, about half the memory of fp32\n"
        "2. gradient checkpointing - recompute activations during backward, costs ~30% extra time\n"
        "3. gradient accumulation - same effective batch with micro-batches\n"
        "4. smaller batch only as the last resort because it changes the training dynamics",

        "Honestly the batch size is the one knob I'd leave alone as long as possible - it's "
        "tied to the learning rate schedule and to how well the GPU is kept busy. The cheap "
        "wins come first: autocast to bfloat16 so every activation is stored in 16 bits, "
        "which is about a 2x saving there. Then wrap the transformer blocks in "
        "torch.utils.checkpoint so their internals get recomputed on the way back instead of "
        "sitting in memory. If I need the bigger batch for the optimizer, I accumulate grads "
        "over 4 smaller steps.",

        "ok so OOM. step 1: turn on AMP (fp16 + GradScaler) - weights/activations in half the"
        " bytes. step 2: activation checkpointing - you store fewer activations and redo part"
        " of the forward in backward, so ~1/3 slower but way less memory. step 3: grad "
        "accumulation so the optimizer still sees the same batch. Also try deepspeed ZeRO to "
        "shard optimizer state. Dropping the batch size is last since it changes convergence "
        "and your GPU runs at lower utilization.",

        "Lower the precision: bf16 autocast means the saved activations and the grads are "
        "16-bit, half of what fp32 needs. Use activation recomputation (checkpointing) so "
        "only block inputs are stored and the rest is rebuilt during the backward pass, at "
        "the price of extra forward compute. Split each batch into micro-batches and "
        "accumulate gradients, so the update uses the same total batch. Only then go down in "
        "batch size, because that changes the gradient noise and the tuned hyperparameters.",

        "The first thing people do is reduce the batch, but that changes the optimisation "
        "dynamics. I'd rather enable bf16 autocast (activations stored in 2 bytes instead of "
        "4), then activation checkpointing, which recomputes each block's internals in the "
        "backward pass at roughly 30% extra compute, and then accumulate gradients over "
        "micro-batches to keep the effective batch size.",

        "If I reduced the batch first I'd change the training dynamics, so no. Instead: "
        "fp16/bf16 autocast halves the activation memory; checkpointing recomputes "
        "activations in backward (extra compute, less memory); gradient accumulation keeps "
        "the same effective batch. Shrink the batch only after all that fails.",
    ],
    "partial": [
        "I would try mixed precision training and gradient checkpointing first. Both of these "
        "save a lot of memory.",

        "Use gradient accumulation: run several small micro-batches and only call "
        "optimizer.step() after summing their gradients, so the effective batch size stays the "
        "same. Lowering the batch itself would change the training dynamics.",

        "Switch to bf16, it halves the memory of activations and gradients compared to fp32, so "
        "the same batch should fit.",

        "I'd turn on gradient checkpointing, which recomputes activations during the backward "
        "pass instead of storing them. It makes each step slower, but the activation memory "
        "goes down a lot.",

        "Mixed precision, because fp16 numbers take half the space of fp32, and maybe "
        "gradient accumulation.",

        "I'd try mixed precision, gradient checkpointing and gradient accumulation before "
        "reducing the batch size, which is a last resort.",
    ],
    "wrong": [
        "I would reduce the batch size first, since that is the quickest fix, and then restart "
        "training.",
        "Buy a GPU with more memory, or restart the kernel and call torch.cuda.empty_cache() to "
        "clear the memory.",
        "Increase the learning rate and train for fewer epochs so the model uses less memory.",
        "Save checkpoints of the model to disk more often so less of it has to stay on the GPU.",

        "I would check for memory leaks, e.g. tensors kept in a Python list across "
        "iterations, and call del on them. Also use torch.no_grad() during validation.",

        "Just make the batch smaller, that's what everyone does, it's the easiest.",
    ],
    "stuffed": [
        "mixed precision, fp16, bf16, gradient checkpointing, recompute, gradient accumulation, "
        "effective batch size, last resort, training dynamics, GPU utilization, ZeRO, 8-bit Adam",
        "bf16 bf16 bf16 checkpointing checkpointing checkpointing accumulation accumulation "
        "last resort last resort",
        "mixed precision halves memory checkpointing recompute activations accumulation "
        "effective batch last resort dynamics utilization sharding",
        "The mixed precision and the checkpointing and the recompute and the accumulation and "
        "the effective batch and the last resort and the utilization and the sharding.",

        "Mixed precision is good. Checkpointing is good. Accumulation is good. Last resort is"
        " good.",
    ],
    "offtopic": [
        "I really enjoyed this course so far, the notebooks are well written and the exercises "
        "were fun.",
        "Paris is the capital of France.",
        "The transformer architecture uses self-attention so that every token can look at "
        "every other token in the sequence.",
    ],
    "copied": [
        "You hit an out-of-memory error while training a large model. What would you try "
        "before reducing the batch size?",
        "You hit an out of memory error while training a large model. I would try something "
        "before reducing the batch size.",
    ],
    "misconception": [
        ("I'd use bf16 mixed precision, which halves activation memory, plus gradient "
         "checkpointing to recompute activations in the backward pass, and gradient "
         "accumulation to keep the same effective batch.",
         "I'd reduce the batch size first. Then I'd use bf16 mixed precision, which halves "
         "activation memory, plus gradient checkpointing to recompute activations in the "
         "backward pass, and gradient accumulation to keep the same effective batch."),
        ("Mixed precision and activation checkpointing free a lot of memory; checkpointing "
         "costs some extra compute.",
         "Mixed precision and activation checkpointing free a lot of memory; checkpointing "
         "costs some extra compute. I would also save checkpoints to disk more often."),
    ],
}

CKPT = {
    "strong": [
        "Normally the forward pass keeps every intermediate activation so that backward can use "
        "them. With checkpointing you only keep the inputs of each segment and throw the rest "
        "away, which is where the memory saving comes from. But backward still needs those "
        "activations, so it has to run the forward of each segment again to rebuild them. "
        "That's roughly one extra forward pass, around 20-40% more compute per step, so it is "
        "only worth it when memory is the binding constraint.",

        "It isn't free because the activations that are not saved have to be recomputed during "
        "the backward pass. Checkpointing stores only a few tensors (the checkpoint boundaries) "
        "instead of all activations, so activation memory drops a lot, e.g. from O(n) to "
        "O(sqrt n). The price is re-running the forward computation of every checkpointed "
        "block, which makes each training step about 30% slower. You should use it where "
        "memory is the bottleneck, not everywhere.",

        "Gradients need the activations from the forward pass. Checkpointing deliberately "
        "discards most of them and only remembers some inputs; when backprop reaches a segment, "
        "that segment's forward is computed a second time to regenerate the activations. So "
        "you pay with extra computation (about one more forward, maybe a third more time) to "
        "save memory. If you aren't running out of memory, that extra time is just wasted.",

        "Memory goes down because the intermediate results inside each checkpointed block are"
        " freed right after the forward pass; only the block's input survives. But backprop "
        "needs those intermediates to compute gradients, so when it gets to that block it re-"
        "executes the block's forward to get them back. That duplicate work is roughly a "
        "whole extra forward pass, so a step costs about 30% more time. You're buying memory "
        "with compute, which only pays off if memory is what stops you.",

        "Activations aren't kept -> must be recomputed in backward -> extra forward pass "
        "(~33% compute overhead). Saves memory, costs time. Use only when memory-bound.",

        "You trade compute for memory. Instead of caching every layer's output for the "
        "backward pass, you cache a few and recompute the others from the nearest checkpoint "
        "when the gradient needs them. The recompute is basically doing the forward again, so"
        " training is maybe 20-30% slower. It is not a free lunch.",

        "Checkpointing reduces activation memory, which is often larger than the parameters. "
        "It keeps only the activations at checkpoint boundaries and recomputes everything in "
        "between during backward, so you do roughly one extra forward pass, about 30% slower."
        " Gradient memory is unchanged. That's only worth paying when you're memory-bound.",

        "There is no free lunch: the memory it frees up is paid for with compute. Activations"
        " inside a segment are thrown away after the forward, and backward re-runs the "
        "segment's forward to get them again, i.e. an extra forward per step (~20-40% more "
        "time). If memory is not your bottleneck, don't use it.",
    ],
    "partial": [
        "Because it has to recompute the activations, which takes more time.",
        "It saves memory by not storing all the activations, but this makes training slower.",
        "It's a tradeoff: you use less memory but each step takes longer, so it only makes "
        "sense if you're short on memory.",

        "Because during backprop you need the activations and they were not saved, so the "
        "network has to calculate them again.",

        "It has to redo the forward pass for parts of the network, so it's slower.",
    ],
    "wrong": [
        "Checkpointing saves the model weights to disk every few epochs, so the GPU doesn't "
        "have to hold them. Loading them back takes time.",
        "It reduces memory because it compresses the gradients into a smaller format, and the "
        "compression takes time.",
        "Because the GPU has to wait for the CPU to transfer the data.",

        "Checkpointing stores the gradients on the CPU so that the GPU has more room, and "
        "copying them back is slow.",

        "Checkpointing is essentially free: modern GPUs are so fast that recomputing costs "
        "nothing, it just saves memory.",

        "It reduces memory by storing the weights in lower precision, which is slower to "
        "compute.",
    ],
    "stuffed": [
        "It is about activations. It is about recompute. It is about backward. It is about "
        "extra forward passes. It is about 30% slower. It is about memory bound.",

        "activations, not stored, recompute, backward pass, extra forward pass, 30% slower, "
        "memory bound, sqrt(n), segments",
        "recompute recompute recompute forward forward backward backward activations "
        "activations memory memory",
        "activations recompute forward backward extra pass slower memory bound segments sqrt "
        "tradeoff",
    ],
    "offtopic": [
        "I think bf16 is better than fp16 because it is newer.",
        "My favourite optimizer is Adam because it converges quickly on most problems.",
    ],
    "copied": [
        "Why does gradient checkpointing reduce memory at the cost of training time, rather "
        "than being a free optimization?",
        "Gradient checkpointing reduces memory at the cost of training time rather than being "
        "a free optimization.",
    ],
    "misconception": [
        ("Checkpointing drops the intermediate activations and recomputes them in the backward "
         "pass, so you pay about one extra forward pass (roughly 30% more time) for a big cut "
         "in activation memory.",
         "Checkpointing drops the intermediate activations and recomputes them in the backward "
         "pass, so you pay about one extra forward pass (roughly 30% more time) for a big cut "
         "in activation memory. It also reduces the memory of the parameters."),
        ("It only keeps the segment inputs and recomputes the rest during backward.",
         "It only keeps the segment inputs and recomputes the rest during backward, so "
         "basically it is free."),
    ],
}

FP16 = {
    "strong": [
        "fp16 has only 5 exponent bits, so its range is small: anything below about 6e-8 "
        "(2^-24) rounds to zero. Many gradients are that small, so they underflow and the "
        "update is lost. Loss scaling multiplies the loss by a big factor before backward so "
        "the gradients are shifted into the representable range, and they are divided by the "
        "same factor before the optimizer step; GradScaler also skips steps that produce "
        "inf/NaN. bf16 keeps the 8-bit exponent of fp32, so it has the same range and small "
        "gradients don't underflow.",

        "The problem with fp16 is dynamic range, not precision. Its smallest subnormal is "
        "around 6e-8, and small gradient values flush to zero. Scaling the loss up (say by "
        "2^16) scales every gradient by the same factor, which keeps them above the underflow "
        "limit; you unscale before updating the weights. bfloat16 uses the same number of "
        "exponent bits as float32, so its range is as wide as fp32's and gradients don't "
        "underflow, which means no scaler is needed.",

        "Because half precision (fp16) cannot represent very small numbers: the exponent is "
        "too narrow and tiny gradients become zero. Multiplying the loss by a scale factor "
        "makes all gradients bigger by that factor so they survive, and they're unscaled "
        "afterwards (a dynamic scaler lowers the factor and skips the step if it sees infs). "
        "bf16 trades mantissa precision for exponent range: it has the same 8 exponent bits "
        "as fp32, so underflow isn't an issue.",

        "In fp16 the exponent only has 5 bits, so the smallest number you can represent is "
        "not small enough: gradients like 1e-9 just become 0. With loss scaling you multiply "
        "the loss by something like 65536 before calling backward, every gradient gets "
        "multiplied by the same number (chain rule), so they are big enough to be stored in "
        "fp16; before optimizer.step() you divide them back. bf16 has 8 exponent bits like "
        "fp32, so 1e-9 is representable; it just has fewer mantissa bits.",

        "fp16: 5-bit exponent, min subnormal 2^-24, so small grads underflow. Scale loss by S"
        " -> grads x S, unscale before step, skip step on inf. bf16: 8-bit exponent = fp32 "
        "range, no underflow, no scaler; costs precision (7-bit mantissa).",

        "fp16 needs a GradScaler and bf16 doesn't, because fp16 has only 5 exponent bits: "
        "gradients smaller than about 6e-8 underflow to zero. Multiplying the loss by a large"
        " scale factor (say 2^16) lifts all gradients into fp16's range, and the scaler "
        "divides them by the same factor before the optimizer step. bf16 has the same 8 "
        "exponent bits as fp32, so nothing underflows; its weakness is precision, not range.",
    ],
    "partial": [
        "In fp16 small gradients underflow to zero, so you multiply the loss by a constant to "
        "make them larger.",
        "bf16 has the same exponent range as fp32, so it doesn't need loss scaling. fp16 has a "
        "much smaller range.",
        "fp16 has a smaller range than bf16 so gradients can underflow; bf16 has the same "
        "range as fp32.",

        "bf16 has a bigger range than fp16 so it doesn't overflow or underflow as easily. "
        "fp16 needs the scaler to avoid gradients going to 0.",

        "The loss scaler multiplies the loss so the gradients don't underflow in fp16. bf16 "
        "doesn't need it.",

        "The dynamic range of bf16 is the same as fp32, fp16's is much narrower.",
    ],
    "wrong": [
        "bf16 is more precise than fp16, so it doesn't lose the small gradients.",
        "fp16 is faster on GPUs and bf16 is slower, so only fp16 needs the scaler.",
        "Both need loss scaling really; bf16 also needs a GradScaler to be stable.",

        "Because fp16 is less accurate than bf16, the scaler fixes the rounding errors.",

        "bf16 also requires loss scaling, but PyTorch does it automatically.",

        "Because fp16 overflows easily, so the loss is scaled down to avoid overflow; bf16 "
        "has more precision.",
    ],
    "stuffed": [
        "fp16, underflow, 2^-24, loss scaling, unscale, GradScaler, inf, NaN, bf16, 8 exponent "
        "bits, fp32 range, mantissa",
        "underflow underflow underflow scale scale scale exponent exponent range range",
        "fp16 narrow range underflow zero gradients scale loss unscale step bf16 same exponent "
        "fp32 range",
    ],
    "offtopic": [
        "Adam keeps two extra states per parameter, so it uses more memory than SGD.",
        "I don't know.",
    ],
    "copied": [
        "Why does fp16 training need loss scaling and bf16 does not?",
        "fp16 training needs loss scaling and bf16 does not.",
    ],
    "misconception": [
        ("fp16 gradients underflow to zero because of its narrow exponent range, so we "
         "multiply the loss by a scale factor and unscale the gradients before the step. bf16 "
         "has fp32's exponent range, so there is no underflow.",
         "fp16 gradients underflow to zero because of its narrow exponent range, so we "
         "multiply the loss by a scale factor and unscale the gradients before the step. bf16 "
         "has fp32's exponent range, so there is no underflow, although bf16 still needs a "
         "GradScaler to be safe."),
        ("Small fp16 gradients underflow, so the loss is multiplied by a large factor.",
         "Small fp16 gradients underflow, so the loss is multiplied by a large factor. fp16 "
         "actually has more range than bf16, but bf16 is more precise."),
    ],
}

ACCUM = {
    "strong": [
        "The full-batch loss is a mean over samples, and the gradient of a sum is the sum of "
        "the gradients. backward() adds into .grad instead of overwriting it, so if each "
        "micro-batch loss is divided by k and you only call zero_grad() and step() after the "
        "k-th micro-batch, .grad ends up equal to the full-batch gradient. It stops being "
        "equal when micro-batches have different sizes or token counts (a plain mean of means "
        "weights them wrongly) and with BatchNorm, whose statistics are per micro-batch.",

        "Gradients are linear in the loss. PyTorch accumulates them in p.grad across backward "
        "calls, so scaling each micro-batch loss by 1/k and stepping once every k batches gives "
        "exactly the average gradient of the whole batch (up to floating point rounding). They "
        "differ if the last micro-batch is smaller or sequences have different numbers of "
        "tokens, unless you normalize by the total count; BatchNorm also sees smaller batches, "
        "so its statistics differ.",

        "Because backprop is linear: the full batch gradient is the average of the per-sample "
        "gradients, and gradients accumulate in .grad, so averaging over k equal micro-batches "
        "gives the same thing as long as each loss is divided by k and grads are only zeroed "
        "after the optimizer step. Not equal when the micro-batches aren't the same size (or "
        "padding differs), and when layers like batch norm compute statistics over the batch. "
        "Dropout randomness also makes it not bit-identical.",

        "Because the loss is an average over examples, and differentiation is linear, so the "
        "average of the micro-batch gradients equals the gradient of the average. PyTorch "
        "helps because .grad is summed across backward calls until you zero it. You have to "
        "divide each micro-batch loss by the number of accumulation steps, and only "
        "step/zero_grad after the last one. It breaks when micro-batches have different "
        "numbers of real (non-padding) tokens, because then the per-micro-batch mean gives "
        "each token a different weight, and with BatchNorm, which normalizes using micro-"
        "batch statistics.",

        "\u2207 of mean = mean of \u2207. backward() accumulates into .grad; loss/k per "
        "micro-batch; step + zero_grad every k. Breaks: uneven micro-batch sizes / token "
        "counts (need count weighting), BatchNorm (per-micro-batch stats), dropout RNG.",

        "Since the loss is a mean over samples and gradients are linear, the sum of the k "
        "micro-batch gradients (each loss divided by k) equals the full-batch gradient; "
        "backward just adds into .grad. If you called zero_grad after every micro-batch you "
        "would lose the accumulated gradient, so zero only after the step. It breaks with "
        "unequal micro-batch sizes or token counts and with BatchNorm, whose statistics "
        "depend on the micro-batch.",
    ],
    "partial": [
        "Because gradients add up in .grad over the micro-batches, and you divide the loss by k.",
        "It's not equal when you use BatchNorm, because the batch statistics are computed on "
        "the smaller micro-batch, or when the micro-batches have different sizes.",
        "The gradient is linear, so summing the micro-batch gradients gives the full gradient, "
        "as long as zero_grad is only called after the optimizer step.",

        "Gradients just get added up each time you call backward, and dividing by k turns the"
        " sum into an average. It's the same as the big batch unless you use batch norm.",

        "If the last micro-batch is smaller than the others, or if you have BatchNorm layers,"
        " the result will be different.",

        "You get the same result as long as each micro-batch loss is scaled by 1/k and the "
        "grads are summed in .grad.",

        "Because gradients are linear. They're not equal if the model has batchnorm.",
    ],
    "wrong": [
        "They are always exactly the same because the optimizer sees the same data in the end.",
        "Accumulation gives a bigger learning rate, so the result is equivalent.",
        "You should call zero_grad after each micro-batch so the gradients don't get too "
        "large; then they match the full batch.",

        "They are equal because accumulation uses the same learning rate.",

        "They are always identical, no matter what layers you use.",

        "zero_grad should be called after each micro-batch, otherwise the gradients explode.",
    ],
    "stuffed": [
        "linearity, sum of gradients, .grad accumulates, loss / k, zero_grad at boundary, "
        "unequal sizes, token counts, BatchNorm statistics, dropout",
        "linear linear linear sum sum sum grad grad batchnorm batchnorm batchnorm tokens tokens",
        "linearity gradients accumulate grad divide loss k zero_grad boundary unequal sizes "
        "token counts batchnorm dropout",
    ],
    "offtopic": [
        "Gradient descent moves the weights in the direction that decreases the loss.",
        "I prefer PyTorch over TensorFlow since the API feels more pythonic.",
    ],
    "copied": [
        "Why are gradients from k micro-batches with accumulation equal to the full-batch "
        "gradient, and when are they not?",
        "Gradients from k micro-batches with accumulation are equal to the full-batch gradient.",
    ],
    "misconception": [
        ("Backward adds into .grad, so dividing each loss by k and stepping every k micro-batches "
         "gives the full-batch gradient; BatchNorm and unequal sizes break it.",
         "Backward adds into .grad, so dividing each loss by k and stepping every k micro-batches "
         "gives the full-batch gradient. You should call zero_grad after each micro-batch to "
         "keep them clean. BatchNorm and unequal sizes break it."),
        ("Gradients are linear, so summing the micro-batch gradients in .grad gives the same "
         "result as the full batch.",
         "Gradients are linear, so summing the micro-batch gradients in .grad gives the same "
         "result as the full batch. They are always exactly equal."),
    ],
}

# Assignment 07 (interview prep): activations vs batch and depth, allocated vs reserved,
# sharding. Same labels; written before the patterns, not fitted to them.
ACTS = {
    "strong": [
        "During the forward pass every layer saves its outputs because the backward pass needs "
        "them to compute the gradients. That saved memory is per example, so it grows linearly "
        "with the batch size (and the sequence length), and it also grows linearly with the "
        "number of layers, since each layer stores its own. The weights, their gradients and "
        "Adam's state don't depend on the batch at all: they're a fixed cost for a given model. "
        "So when you raise the batch, it's the activations that blow up and cause the OOM.",

        "Parameters, gradients and optimizer state are fixed by the model size; the batch "
        "doesn't change them. Activations are the intermediate results kept from the forward "
        "pass for backprop, one set per sample per layer: double the batch and activation "
        "memory doubles, double the depth and it doubles again. For transformers there is also "
        "an attention term that grows with the square of the sequence length. That's why "
        "activations usually dominate and decide whether a batch fits.",

        "Activation memory ~ batch x seq_len x hidden x layers (plus an s^2 attention term), "
        "because autograd keeps each layer's intermediate tensors until backward uses them. "
        "Model states (weights, grads, optimizer moments) are independent of batch size. So "
        "activations are the part that scales with the batch and usually the biggest consumer.",

        "Think of it as fixed vs variable cost. The fixed part is the model: weights, gradients "
        "and optimizer moments, the same whatever batch you pick. The variable part is what "
        "autograd stashes during forward so backward can compute gradients: every layer's "
        "intermediate outputs for every sample. It is proportional to batch size and to depth, "
        "so a deeper model or a bigger batch multiplies it, and for large batches it is far "
        "larger than the weights.",

        "Backward needs the inputs of each op, so forward keeps them in memory until the "
        "backward pass. Each layer adds its own activations, so memory grows linearly with "
        "depth, and each sample adds its own, so it grows linearly with batch size "
        "(quadratically with sequence length in eager attention). Parameters don't grow with "
        "batch, so for a fixed model it's the activations that decide whether a batch fits.",
    ],
    "partial": [
        "Because activations grow with the batch size, while the parameters stay the same.",

        "Activations are stored in the forward pass so they can be used in backward, and "
        "deeper networks have more of them.",

        "Activation memory doubles when you double the batch size, and also when you double "
        "the number of layers.",

        "The weights are a fixed cost, but every sample in the batch adds its own activations, "
        "so that part keeps growing.",
    ],
    "wrong": [
        "Parameters take the most memory because the model has billions of them; the batch "
        "size only changes how long an epoch takes.",

        "Activations are the weights after the activation function, so they are the same size "
        "as the parameters and don't depend on the batch.",

        "Doubling the batch size doubles the gradients and the optimizer state, so the "
        "gradients grow with the batch and they decide whether it fits.",

        "Activation memory grows quadratically with the batch size, and the number of layers "
        "does not matter.",
    ],
    "stuffed": [
        "activations, forward, backward, saved, batch size, linear, layers, depth, parameters "
        "fixed, optimizer state, quadratic, attention",
        "activations activations batch batch batch layers layers linear linear saved saved "
        "backward backward",
        "activations saved forward backward linear batch linear depth parameters independent "
        "batch dominate quadratic attention",
    ],
    "offtopic": [
        "I like using Adam with a cosine learning rate schedule and a short warmup.",
        "The GPU in my laptop is an RTX 3060 with 6 GB of memory, which is enough for games.",
    ],
    "copied": [
        "Why do activations, rather than parameters, usually decide whether a training batch "
        "fits in memory, and how does their memory scale with batch size and depth?",
        "Activations, rather than parameters, usually decide whether a training batch fits in "
        "memory.",
    ],
    "misconception": [
        ("Forward saves every layer's activations for the backward pass, so that memory grows "
         "linearly with batch size and with depth.",
         "Forward saves every layer's activations for the backward pass, so that memory grows "
         "linearly with batch size and with depth. The parameters and gradients also grow with "
         "the batch size."),
        ("Activations are saved for backward, and each layer keeps its own; the weights are a "
         "fixed cost.",
         "Activations are saved for backward, and each layer keeps its own; the weights are a "
         "fixed cost. Activation memory grows quadratically with the batch size."),
    ],
}

ALLOC = {
    "strong": [
        "memory_allocated() only counts the bytes of tensors that are alive right now. "
        "PyTorch's caching allocator doesn't give freed memory back to the driver; it keeps "
        "those blocks reserved so the next allocations can reuse them without a slow "
        "cudaMalloc, so memory_reserved() is usually larger. nvidia-smi shows the reserved "
        "memory plus the CUDA context and anything other processes use. It's not a leak as "
        "long as allocated stays flat from step to step; the cache is simply reused.",

        "Because of the caching allocator. When a tensor is freed, its block stays reserved by "
        "PyTorch for reuse instead of returning to the GPU, so reserved >= allocated, and "
        "nvidia-smi sees the reserved amount plus the CUDA context (a few hundred MB). A leak "
        "would mean memory_allocated keeps growing every iteration; a big but stable reserved "
        "pool is just the cache.",

        "nvidia-smi doesn't know about PyTorch's tensors: it sees what the process has taken "
        "from the driver, which is the allocator's reserved pool plus the CUDA context and "
        "kernels. memory_allocated counts live tensors only. Freed blocks are cached for later "
        "reuse, so the gap is cached memory, not lost memory. You'd only worry if allocated "
        "keeps climbing across steps.",

        "allocated = live tensors; reserved = what the caching allocator holds (live + cached "
        "free blocks, rounded up); nvidia-smi = reserved + CUDA context + other processes. The "
        "cached blocks get reused by later allocations, so it's not a leak unless allocated "
        "grows every step. empty_cache() releases the cache but is rarely needed.",
    ],
    "partial": [
        "PyTorch caches freed memory so it can reuse it for new tensors, so nvidia-smi shows "
        "more than what's allocated.",

        "memory_allocated only counts live tensors, while nvidia-smi also includes the CUDA "
        "context.",

        "The difference is the reserved memory: the allocator keeps it even after the tensors "
        "are deleted.",

        "nvidia-smi also counts the CUDA context and other processes on the GPU; you can call "
        "torch.cuda.empty_cache() to give unused memory back.",
    ],
    "wrong": [
        "Because of a memory leak in your training loop: some tensors are never freed, so you "
        "should call torch.cuda.empty_cache() after every step.",

        "nvidia-smi is inaccurate; it rounds memory up to whole gigabytes and updates too "
        "slowly.",

        "memory_allocated only shows the memory of the model parameters, while nvidia-smi also "
        "counts the gradients.",

        "The GPU compresses tensors in hardware, so the number from PyTorch is smaller than "
        "what the driver reports.",
    ],
    "stuffed": [
        "caching allocator, reserved, allocated, live tensors, CUDA context, other processes, "
        "reuse, empty_cache, not a leak, memory_reserved",
        "reserved reserved reserved cache cache cache context context allocated allocated "
        "reuse reuse",
        "allocator caches freed blocks reserved reuse live tensors allocated context "
        "nvidia-smi empty_cache stable leak",
    ],
    "offtopic": [
        "Gradient checkpointing trades compute for memory by recomputing activations.",
        "My training run crashed last night because the data loader ran out of files.",
    ],
    "copied": [
        "Why can nvidia-smi show much more GPU memory in use than torch.cuda.memory_allocated(), "
        "and why is that usually not a leak?",
        "nvidia-smi can show much more GPU memory in use than torch.cuda.memory_allocated(), "
        "and that is usually not a leak.",
    ],
    "misconception": [
        ("memory_allocated counts live tensors; the caching allocator keeps freed blocks "
         "reserved for reuse, and nvidia-smi adds the CUDA context.",
         "memory_allocated counts live tensors; the caching allocator keeps freed blocks "
         "reserved for reuse, and nvidia-smi adds the CUDA context. So it is a memory leak, "
         "and you should restart the kernel."),
        ("The caching allocator keeps freed blocks for reuse, so memory_reserved is larger "
         "than memory_allocated.",
         "The caching allocator keeps freed blocks for reuse, so memory_reserved is larger "
         "than memory_allocated. Calling empty_cache() frees the tensors and lowers "
         "memory_allocated."),
    ],
}

SHARD = {
    "strong": [
        "Checkpointing, mixed precision and accumulation mostly shrink activations. The model "
        "states stay: with mixed-precision Adam that's 16 bytes per parameter, so a 7B model "
        "needs about 112 GB before any activation, more than one GPU has. Plain data "
        "parallelism doesn't help, since every GPU keeps a full replica. ZeRO/FSDP shard the "
        "optimizer states, gradients and parameters across the data-parallel GPUs, so each "
        "holds roughly 1/N of them, at the price of extra communication. Tensor or pipeline "
        "parallelism split the layers themselves; you need them when even one layer doesn't "
        "fit, and they add pipeline bubbles.",

        "You shard when the parameters, gradients and optimizer state no longer fit on a single "
        "GPU. Data parallelism copies all of them onto every GPU, so adding GPUs doesn't reduce "
        "per-GPU memory. ZeRO stage 1/2/3 (or FSDP) partition the optimizer state, then the "
        "gradients, then the parameters across the N GPUs, so per-GPU memory drops to about "
        "1/N, but weights have to be gathered before each layer, which costs bandwidth. Model "
        "parallelism (tensor or pipeline) is for when a single layer is too big or you need to "
        "split the work.",

        "Single-GPU tricks don't reduce the optimizer state or the weights much, they mainly "
        "target activations. Once the model states are bigger than one device's memory you "
        "have to spread them: FSDP keeps only a shard of the params, grads and Adam moments on "
        "each rank and all-gathers them when needed, trading memory for communication. Tensor "
        "parallelism splits individual matmuls across GPUs and pipeline parallelism splits the "
        "layers into stages; use those when even a sharded layer doesn't fit.",

        "When the model itself does not fit on one GPU. DDP replicates everything, so it never "
        "lowers memory per GPU. Sharding (ZeRO-3/FSDP) splits params, grads and optimizer "
        "states so each GPU stores 1/N of them; the cost is more communication. Pipeline or "
        "tensor parallelism puts different layers on different GPUs when a layer or its "
        "activations are too large.",
    ],
    "partial": [
        "When the model is too big to fit on one GPU, you split its parameters across several "
        "GPUs.",

        "FSDP shards the optimizer state, gradients and parameters across GPUs, but it needs a "
        "lot of communication.",

        "With data parallelism each GPU has a full copy of the model, which wastes memory; ZeRO "
        "removes that by partitioning the optimizer states across GPUs.",

        "Pipeline parallelism puts different layers on different GPUs; you use it when one GPU "
        "can't hold the model, and it has idle bubbles.",
    ],
    "wrong": [
        "Use data parallelism: with 8 GPUs each GPU needs 8 times less memory for the model.",

        "Sharding is only for speed and doesn't change memory; use it for small models that "
        "train too slowly.",

        "You shard the dataset into pieces so that each GPU loads fewer images and the "
        "epoch finishes sooner.",

        "Always shard, it's free: there is no extra communication and every model gets faster.",
    ],
    "stuffed": [
        "ZeRO, FSDP, shard optimizer states, gradients, parameters, 1/N, communication, "
        "all-gather, replica, tensor parallelism, pipeline parallelism, bubbles",
        "shard shard shard replica replica communication communication parameters parameters "
        "gpus gpus",
        "model states do not fit replica data parallel shard optimizer gradients parameters "
        "communication pipeline tensor layers bubbles",
    ],
    "offtopic": [
        "I usually pick the learning rate with a range test before training.",
        "Python lists are slower than NumPy arrays for numeric work.",
    ],
    "copied": [
        "When and why would you shard training state across GPUs (ZeRO/FSDP) or split the "
        "model itself (tensor or pipeline parallelism), instead of only using single-GPU "
        "tricks?",
        "You would shard training state across GPUs or split the model itself instead of only "
        "using single-GPU tricks.",
    ],
    "misconception": [
        ("ZeRO shards the parameters, gradients and optimizer states across GPUs so each holds "
         "about 1/N, at the cost of communication.",
         "ZeRO shards the parameters, gradients and optimizer states across GPUs so each holds "
         "about 1/N, at the cost of communication. Plain data parallelism also reduces the "
         "memory per GPU by N."),
        ("When the model states do not fit on one GPU, FSDP splits the parameters, gradients "
         "and optimizer state across the GPUs.",
         "When the model states do not fit on one GPU, FSDP splits the parameters, gradients "
         "and optimizer state across the GPUs. Sharding is free, there is no communication "
         "overhead."),
    ],
}

KV = {
    "strong": [
        "Every new token attends to all earlier ones, so without a cache each step would rerun the "
        "whole prefix. The cache keeps each layer's keys and values of the tokens already seen, and "
        "a decode step computes only the new token. The cost is memory that grows linearly with "
        "every token and every sequence in the batch; at long contexts it exceeds the weights and "
        "limits the batch. Grouped-query attention lets several query heads share one key/value "
        "head, so the cache is heads/kv_heads times smaller.",

        "Storing the keys and values of past positions means the prefix is never recomputed: each "
        "step only processes the newest token. In exchange the cache grows with the sequence length "
        "and the batch, and for long chats it is bigger than the model weights, which limits how "
        "many requests fit. With GQA the query heads share fewer key/value heads, dividing the "
        "cache by the group size; MQA keeps a single key/value head.",
    ],
    "partial": [
        "The KV cache stores the keys and values of earlier tokens so that the model does not "
        "recompute them at every step, which makes generation much faster.",
        "It costs memory that grows linearly with the sequence length and the batch size, and for "
        "long contexts it can become bigger than the weights.",
    ],
    "wrong": [
        "The KV cache stores the model weights on the GPU so they do not have to be loaded again "
        "for every token, and GQA reduces memory by using fewer query heads.",
        "A KV cache saves memory: it keeps a compressed copy of the activations, so generation "
        "uses less memory.",
        "The cache stores the gradients of the attention layers for the backward pass; it grows "
        "quadratically with the sequence length.",
    ],
    "stuffed": [
        "KV cache, keys, values, past tokens, recompute, new token, linear, sequence, batch, weights, "
        "GQA, kv heads, share, heads/kv_heads, paged, vLLM",
        "cache cache cache keys keys values values tokens tokens heads heads memory memory",
    ],
    "offtopic": [
        "I would fine-tune the model with LoRA and a learning rate of 2e-4 on a single GPU.",
        "Tokenizers split text into subword units with byte-pair encoding.",
    ],
    "copied": [
        "Why does a KV cache make text generation faster, what does it cost in memory, and how "
        "does grouped-query attention reduce that cost?",
        "A KV cache makes text generation faster, it costs memory, and grouped-query attention "
        "reduces that cost.",
    ],
    "misconception": [
        ("The cache keeps the keys and values of past tokens, so each step only computes the new "
         "token, and its memory grows linearly with every token of every sequence.",
         "The cache keeps the keys and values of past tokens, so each step only computes the new "
         "token, and its memory grows linearly with every token of every sequence. The cache also "
         "stores the model weights."),
        ("Grouped-query attention lets several query heads share one key/value head, so the cache "
         "is heads/kv_heads times smaller, and it keeps the keys and values of earlier tokens.",
         "Grouped-query attention lets several query heads share one key/value head, so the cache "
         "is heads/kv_heads times smaller, and it keeps the keys and values of earlier tokens. "
         "The KV cache saves memory."),
    ],
}

LABELLED = {
    "oom_before_batch": OOM,
    "checkpointing_cost": CKPT,
    "fp16_loss_scaling": FP16,
    "accumulation_equivalence": ACCUM,
    "activations_scaling": ACTS,
    "allocated_vs_reserved": ALLOC,
    "sharding_when_why": SHARD,
    "kv_cache_tradeoff": KV,
}


def _labelled_cases():
    for rid, sets in LABELLED.items():
        for label in ("strong", "partial", "wrong", "stuffed", "offtopic", "copied"):
            for i, answer in enumerate(sets[label]):
                yield pytest.param(rid, label, answer, id=f"{rid}-{label}-{i}")
        for i, answer in enumerate(EMPTY):
            yield pytest.param(rid, "empty", answer, id=f"{rid}-empty-{i}")
        yield pytest.param(rid, "overlength", " ".join(sets["strong"]), id=f"{rid}-overlength")


@pytest.mark.parametrize("rid,label,answer", list(_labelled_cases()))
def test_labelled_answer_lands_in_its_band(rid, label, answer):
    lo, hi = BANDS[label]
    result = grade_text(answer, rid)
    assert lo <= result.score <= hi, f"{label} answer scored {result.score:.2f}:\n{result.report()}"


@pytest.mark.parametrize("rid", sorted(LABELLED))
def test_each_rubric_has_the_full_labelled_set(rid):
    sets = LABELLED[rid]
    for label in ("strong", "partial", "wrong", "stuffed", "offtopic", "copied"):
        assert len(sets[label]) >= 2, f"{rid}: need at least two {label} answers"
    assert len(sets["misconception"]) >= 2
    assert len(" ".join(sets["strong"]).split()) > RUBRICS[rid].max_words


@pytest.mark.parametrize("rid", sorted(LABELLED))
def test_misconception_costs_credit(rid):
    for base, with_error in LABELLED[rid]["misconception"]:
        clean, wrong = grade_text(base, rid), grade_text(with_error, rid)
        assert not clean.misconceptions, clean.report()
        assert wrong.misconceptions, wrong.report()
        assert wrong.score < clean.score, f"{clean.report()}\n---\n{wrong.report()}"
        assert any(line.startswith("misconception:") for line in wrong.feedback)


@pytest.mark.parametrize("rid", sorted(RUBRICS))
def test_model_answer_scores_full_and_rubric_is_complete(rid):
    rubric = RUBRICS[rid]
    result = grade_text(rubric.model_answer, rid)
    assert result.score == 1.0, result.report()
    assert not result.misconceptions
    assert len(rubric.model_answer.split()) <= rubric.max_words
    assert rubric.explanation and rubric.question.endswith("?")
    assert rid in rb.rubric_ids() and rb.get_rubric(rid) is rubric
    assert rubric.describe().startswith(rid)


def test_strong_answers_are_mostly_not_flagged():
    flagged = [(rid, a) for rid, sets in LABELLED.items() for a in sets["strong"]
               if grade_text(a, rid).needs_review]
    total = sum(len(sets["strong"]) for sets in LABELLED.values())
    assert len(flagged) <= total // 3, flagged


# ------------------------------------------------------------------ text: mechanics
def test_feedback_names_found_and_missing_concepts():
    r = grade_text("Because it has to recompute the activations, which takes more time.",
                   "checkpointing_cost")
    assert "the dropped activations are recomputed" in r.found
    assert "worth it only when memory is the binding constraint" in r.missing
    assert any(line.startswith("found:") and "recompute" in line for line in r.feedback)
    assert any(line.startswith("missing:") for line in r.feedback)
    assert r.report().splitlines()[0].startswith(("score", "[needs review]"))


@pytest.mark.parametrize("answer", [
    "Checkpointing is not free: the dropped activations are recomputed in backward.",
    "It is not a free optimization, because the activations are recomputed in backward.",
    "Checkpointing isn't free; the activations are recomputed during backward.",
    "There's no such thing as a free lunch here: activations are recomputed in backward.",
    "It is never free, since activations get recomputed during the backward pass.",
])
def test_negated_misconception_does_not_count(answer):
    r = grade_text(answer, "checkpointing_cost")
    assert not r.misconceptions, r.report()
    assert "the dropped activations are recomputed" in r.found


@pytest.mark.parametrize("answer,rid", [
    ("A common mistake is to reduce the batch size first; use bf16 mixed precision and "
     "gradient checkpointing instead.", "oom_before_batch"),
    ("I wouldn't reduce the batch size first; bf16 mixed precision comes before that.",
     "oom_before_batch"),
    ("bf16 doesn't need a GradScaler because it has the same exponent range as fp32.",
     "fp16_loss_scaling"),
    ("bf16 needs no loss scaling since its 8 exponent bits match fp32.", "fp16_loss_scaling"),
    ("They are not always equal: BatchNorm statistics differ per micro-batch.",
     "accumulation_equivalence"),
    ("Don't call zero_grad after each micro-batch, only after the optimizer step.",
     "accumulation_equivalence"),
])
def test_negated_or_reported_misconceptions_are_ignored(answer, rid):
    r = grade_text(answer, rid)
    assert not r.misconceptions, r.report()


@pytest.mark.parametrize("answer,rid,name", [
    ("Checkpointing is free once the model is big enough.", "checkpointing_cost",
     "checkpointing is free"),
    ("bf16 also needs a GradScaler.", "fp16_loss_scaling",
     "says bf16 needs a GradScaler / loss scaling"),
    ("My first step would be to lower the batch size.", "oom_before_batch",
     "reduces the batch size first"),
    # the comparison's subject a pronoun for the sentence's dtype (blind round r9)
    ("bf16 has fp32's exponent range, so it needs no scaling, and it is also more precise than "
     "fp16.", "fp16_loss_scaling", "says bf16 is more precise than fp16"),
    # a wrong item in the list one claim is made of (blind round r9)
    ("It is not exact with normalisation layers such as BatchNorm and LayerNorm, because they "
     "compute their statistics over the micro-batch.", "accumulation_equivalence",
     "says LayerNorm depends on the micro-batch"),
    # blind round r10: a wrong factor of time, a claim by ellipsis, a relative clause
    ("This extra forward roughly doubles the time per step.", "checkpointing_cost",
     "says checkpointing doubles the step time"),
    ("The activations grow with the batch, and so do the gradients.", "peak_moves",
     "says the model states (weights, gradients, optimizer state) grow with the batch"),
    ("The simplest fix is plain DDP on 8 GPUs, which spreads the states so each card holds "
     "14 GB.", "bytes_conventions", "says plain data parallelism (DDP) splits the model states"),
])
def test_plain_misconceptions_are_detected(answer, rid, name):
    assert name in grade_text(answer, rid).misconceptions


def test_misconception_next_to_strong_concepts_is_flagged():
    _, wrong = OOM["misconception"][0]
    r = grade_text(wrong, "oom_before_batch")
    assert r.needs_review and "misconception" in r.review_reason


def test_reported_misconception_is_flagged_for_review():
    r = grade_text("People think it is a free optimization, which is a myth: activations are "
                   "recomputed.", "checkpointing_cost")
    assert not r.misconceptions and r.needs_review, r.report()
    assert "ignored as reported" in r.review_reason


def test_copied_question_earns_nothing_for_the_copied_part():
    rid = "checkpointing_cost"
    own = "It recomputes the activations during backward, which takes extra time."
    copied = RUBRICS[rid].question + " " + own
    a, b = grade_text(own, rid), grade_text(copied, rid)
    assert b.score == pytest.approx(a.score)
    assert b.details["copied_share"] > 0.4
    assert any("copied from the question" in line or "repeats the question" in line
               for line in b.feedback)


def test_keyword_list_inside_an_answer_earns_nothing_for_the_list():
    rid = "oom_before_batch"
    sentence = "I would switch to bf16 mixed precision, which halves activation memory."
    listed = sentence + (" Also: checkpointing, recompute, accumulation, effective batch, "
                         "last resort, sharding.")
    a, b = grade_text(sentence, rid), grade_text(listed, rid)
    assert b.score == pytest.approx(a.score), b.report()
    assert any("bare terms" in line for line in b.feedback)


@pytest.mark.parametrize("answer,rid", [
    # a term with a function word in it ("other processes", "not a leak", "all gather") does
    # not end a keyword list
    ("caching allocator, reserved, allocated, live tensors, CUDA context, other processes, "
     "reuse, empty_cache, not a leak, memory_reserved", "allocated_vs_reserved"),
    ("ZeRO, FSDP, shard optimizer states, gradients, parameters, 1/N, communication, "
     "all-gather, replica, tensor parallelism, pipeline parallelism, bubbles", "sharding_when_why"),
    # eight or more words without a function word, even after a short clause that has one
    ("model states do not fit replica data parallel shard optimizer gradients parameters "
     "communication pipeline tensor layers bubbles", "sharding_when_why"),
])
def test_keyword_lists_with_a_few_function_words_earn_nothing(answer, rid):
    r = grade_text(answer, rid)
    assert r.score == 0.0, r.report()


def test_a_short_enumeration_inside_prose_is_not_a_keyword_list():
    answer = ("Use bf16, then checkpointing, then accumulation; only as a last resort reduce the "
              "batch, because that changes the training dynamics.")
    r = grade_text(answer, "oom_before_batch")
    assert not any("bare terms" in line for line in r.feedback), r.report()
    assert r.score > 0.5, r.report()


def test_terse_notes_are_graded_but_flagged():
    notes = ("- bf16 autocast: halves activation + gradient memory\n"
             "- activation checkpointing: recompute fwd in bwd, ~30% slower\n"
             "- grad accumulation: same effective batch\n"
             "- smaller batch only last: changes dynamics, lowers GPU utilization")
    r = grade_text(notes, "oom_before_batch")
    assert r.score >= 0.9 and r.needs_review, r.report()


def test_over_length_answer_gets_a_message():
    r = grade_text("memory " * 500, "checkpointing_cost")
    assert r.score == 0 and "limit of 120 words" in r.feedback[0]
    huge = grade_text("x" * 10_000_000, "checkpointing_cost")
    assert huge.score == 0 and "characters" in huge.feedback[0] and huge.needs_review
    no_spaces = grade_text(",".join(["recompute"] * 200), "checkpointing_cost")
    assert no_spaces.score == 0 and "characters" in no_spaces.feedback[0]   # a keyword list
    words = " ".join(CKPT["strong"]).split()
    at_limit, over = " ".join(words[:120]), " ".join(words[:121])
    assert grade_text(at_limit, "checkpointing_cost").score > 0
    assert "121 words, over the limit of 120" in grade_text(over, "checkpointing_cost").feedback[0]
    assert max(len(" ".join(sets["strong"][i].split())) for sets in LABELLED.values()
               for i in range(len(sets["strong"]))) < 10 * 120   # the cap never bites real answers


@pytest.mark.parametrize("answer", [
    "Memory on the GPU is used by the forward computation and the backward computation, and "
    "activations are part of memory, and time matters when you train, so checkpoint your "
    "work and store things carefully.",
    "Checkpointing is about how the network handles memory on the GPU: the forward "
    "computation creates activations, and then the backward computation uses them later "
    "on, which takes its own time.",
])
def test_vague_technical_prose_that_matches_little_is_decided_low(answer):
    """Technical words with no idea of the question: decided low, not sent to a person (blind
    rounds r3-r9: 86% of such answers sent to review deserved what the grader gave them; the
    rest were analogies, the next test)."""
    r = grade_text(answer, "checkpointing_cost")
    assert r.score <= 0.2 and not r.needs_review, r.report()


def test_an_analogy_that_matches_little_goes_to_review():
    """Plain words (an analogy) that match an idea or two: the grader cannot read the rest, so
    the low score is provisional, not decided."""
    analogy = ("Checkpointing works like a student who keeps only the chapter headings of a long "
               "book instead of all the notes, and when the exam on the way back asks about a "
               "chapter, reads that chapter a second time. The bag is lighter, the evening is "
               "longer.")
    r = grade_text(analogy, "checkpointing_cost")
    assert r.needs_review and "plain words" in r.review_reason, r.report()


def test_one_detail_without_a_main_idea_earns_nothing():
    """A detail (a concept lighter than the rubric's main ideas) alone is a loose word, not an answer:
    0, decided (it scored 0.1-0.18, outside the band, for off-topic answers in the blind rounds).
    """
    r = grade_text("The KV cache matters for serving: vLLM manages the cache memory of each GPU "
                   "in pages, batching many requests per kernel for throughput.",
                   "kv_cache_tradeoff")
    assert r.score == 0.0 and not r.needs_review, r.report()
    assert "one detail" in r.report()


class _EvilStr(str):
    def __eq__(self, other):
        return True

    def __hash__(self):
        return 0

    def lower(self):
        return "recompute recompute"

    def strip(self, *a):
        return "recompute"

    def __str__(self):
        return RUBRICS["checkpointing_cost"].model_answer


@pytest.mark.parametrize("answer", [None, 42, 3.5, b"recompute", ["recompute"], {"a": 1},
                                    object(), True])
def test_non_text_answer_scores_zero_with_a_message(answer):
    r = grade_text(answer, "checkpointing_cost")
    assert r.score == 0 and "expected the answer as text" in r.feedback[0]


def test_str_subclass_is_read_as_plain_text():
    r = grade_text(_EvilStr("Paris is the capital of France."), "checkpointing_cost")
    assert r.score == 0


def test_unknown_rubric_is_an_instructor_error():
    with pytest.raises(ValueError, match="unknown rubric"):
        grade_text("anything", "no_such_rubric")


def test_custom_rubric_and_bad_patterns():
    custom = Rubric(
        id="demo", question="What does Adam store per parameter?",
        concepts=(Concept("two moment estimates", (r"(?:two|2) (?:moments?|states?)",
                                                   r"momentum and variance")),),
        misconceptions=(Misconception("says Adam stores nothing", (r"stores nothing",)),),
        model_answer="It keeps two moment estimates.", explanation="exp_avg and exp_avg_sq.",
    )
    assert grade_text("Adam keeps momentum and variance for every weight.", custom).score == 1.0
    assert grade_text("It stores nothing extra.", custom).score == 0.0
    with pytest.raises(ValueError, match="does not compile"):
        Concept("broken", (r"(unclosed",))


def test_normalize():
    assert normalize("Don't use BFloat16 - use float-16!") == "do not use bf16 , use fp16"
    assert normalize("re-compute, 2^-24 and 6e-8") == "re compute , 2^-24 and 6e-8"
    assert normalize("optimizer.zero_grad()\n\n- p.grad") == "optimizer.zero_grad . p.grad"
    assert normalize("it's fp32's range") == "it is fp32 range"


# ------------------------------------------------------------------ numeric
@pytest.mark.parametrize("answer,expected,unit,score", [
    ("28 GB", 28, "GB", 1.0),
    ("28GB", 28, "GB", 1.0),
    ("26.1 GiB", 28, "GB", 1.0),          # 26.1 GiB = 28.02 GB: converted, not rejected
    ("1.5e9 bytes", 1.5, "GB", 1.0),
    ("112 GB", 112, "GB", 1.0),
    (3.2e10, 3.2e10, "B", 1.0),           # plain number = the declared unit
    (28, 28, "GB", 1.0),
    ("~24 GB", 24, "GB", 1.0),
    ("about 24GB", 24, "GB", 1.0),
    ("2.4 x 10^10 B", 24, "GB", 1.0),
    ("1.5 billion bytes", 1.5, "GB", 1.0),
    ("28,000 MB", 28, "GB", 1.0),
    ("26,1 GiB", 28, "GB", 1.0),          # decimal comma
    ("24 GB (22.35 GiB)", 24, "GB", 1.0),  # two consistent forms of one value
    ("24 GiB", 24, "GB", 0.0),            # 25.77 GB: off by exactly GiB/GB, a unit mix-up
    ("22.35 GiB", 24, "GiB", 0.0),        # 24 GB written as GiB: a mix-up, not an estimate
    ("24 GB", 24, "GiB", 0.0),            # 22.35 GiB: a mix-up
    ("26.1 GiB", 24, "GB", 0.5),          # 28.0 GB: 16.8% off, no unit factor: an estimate
    ("1552 Mb", 1552, "MiB", 0.0),        # megabits: 185 MiB
    ("1552 Mb", 194, "MB", 1.0),          # megabits, right as bits
    ("1.3B x 16 B = 20.8 GB", 20.8, "GB", 1.0),   # shown working: the value after "="
    ("16 B/param x 1.3e9 = 20.8e9 bytes", 20.8, "GB", 1.0),
    ("25.1 GB", 24, "GB", 1.0),           # 4.6%
    ("25.3 GB", 24, "GB", 0.5),           # 5.4%
    ("28.7 GB", 24, "GB", 0.5),           # 19.6%
    ("29 GB", 24, "GB", 0.0),             # 20.8%
    ("19.5 GB", 24, "GB", 0.5),           # 18.75% low
    ("684 MiB", 684, "MiB", 1.0),
    ("0.668 GiB", 684, "MiB", 1.0),
    ("30%", 33, "%", 0.5),
    ("1.5B params", 1.5e9, "params", 1.0),
    ("7 billion", 7e9, "", 1.0),
    ("27.2 ms", 27.2, "ms", 1.0),
    ("0.0272 s", 27.2, "ms", 1.0),
])
def test_numeric_scores(answer, expected, unit, score):
    r = grade_numeric(answer, expected, unit)
    assert r.score == score, r.report()
    assert r.kind == "numeric"


def test_numeric_feedback_names_expected_value_and_error():
    r = grade_numeric("26.1 GiB", 24, "GB")
    assert "expected 24 GB" in r.feedback[0] and "16.8% off" in r.feedback[0]
    assert "26.1 GiB" in r.feedback[0]


def test_unit_mixup_scores_zero_and_names_it():
    # issue 16: a number right in the other unit system is a mix-up, not a close estimate
    r = grade_numeric("24 GiB", 24, "GB")
    assert r.score == 0.0 and any("GB vs GiB mix-up" in line for line in r.feedback)
    r = grade_numeric("2 TiB", 2, "TB")
    assert r.score == 0.0 and any("TB vs TiB mix-up" in line for line in r.feedback)
    assert grade_numeric("700 MiB", 700, "MB").score == 1.0   # 4.9%: inside the tolerance
    bits = grade_numeric("1552 Mb", 1552, "MB")
    assert bits.score == 0.0 and any("bits vs bytes mix-up" in line for line in bits.feedback)
    assert grade_numeric("1552 MB", 1552, "MB").score == 1.0
    # an honest estimate 5-20% off keeps its partial credit
    assert grade_numeric("25.3 GB", 24, "GB").score == 0.5


def test_plain_number_is_flagged_unless_the_question_says_its_unit():
    # "0.4" for a question in ms: read as 0.4 ms, flagged, and told it is right in s
    r = grade_numeric("0.4", 400, "ms")
    assert r.score == 0.0 and r.needs_review
    assert any("right if read in s" in line for line in r.feedback)
    wrong = grade_numeric("30", 24, "GB")
    assert wrong.score == 0.0 and wrong.needs_review and "write the unit" in wrong.report()
    said = grade_numeric("30", 24, "GB", plain_in_unit=True)
    assert said.score == 0.0 and not said.needs_review
    assert grade_numeric("24", 24, "GB").score == 1.0 and not grade_numeric("24", 24, "GB").needs_review


@pytest.mark.parametrize("answer, expected, unit", [("32", 4, ""), ("2", 4, "x"), (32, 4, "")])
def test_a_wrong_count_or_factor_is_wrong_not_unitless(answer, expected, unit):
    """A count ("how many accumulation steps?") or a factor has no unit to leave out: a wrong
    plain number scores 0, decided, with no "write the unit" line (07's q18 and q6 once sent
    every wrong answer to review with "a plain number is read in : write the unit with it")."""
    r = grade_numeric(answer, expected, unit)
    assert r.score == 0.0 and not r.needs_review and "write the unit" not in r.report(), r.report()


def test_plain_number_in_bytes_is_flagged():
    r = grade_numeric("24000000000", 24, "GB")
    assert r.score == 0 and r.needs_review
    assert any("right if read in B" in line for line in r.feedback)


def test_ambiguous_prefix_is_flagged_when_it_matters():
    r = grade_numeric("24G", 24, "GB")
    assert r.score == 1.0 and r.needs_review
    assert not grade_numeric("24G", 24, "GB", full_tol=0.1).needs_review


@pytest.mark.parametrize("answer", [
    "", "abc", "GB", "28 gigs", "28 apples", "24 GB or 30 GB", "10^9999 B", "nan GB", "inf",
    None, True, [28], {"GB": 28}, float("nan"), float("inf"), "28 ms", "x" * 10_000,
])
def test_numeric_bad_answers_score_zero_with_message(answer):
    r = grade_numeric(answer, 28, "GB")
    assert r.score == 0.0 and r.feedback and r.feedback[0]
    assert any("expected" in line for line in r.feedback)


class _EvilFloat(float):
    def __eq__(self, other):
        return True

    def __sub__(self, other):
        return 0.0

    def __float__(self):
        return 28.0


def test_numeric_subclasses_are_not_trusted():
    assert grade_numeric(_EvilFloat(1.0), 28, "GB").score == 0.0
    assert grade_numeric(_EvilStr("1 GB"), 28, "GB").score == 0.0


def test_numeric_instructor_errors_raise():
    with pytest.raises(ValueError):
        grade_numeric("1 GB", 1, "furlongs")
    with pytest.raises(ValueError):
        grade_numeric("1 GB", float("nan"), "GB")
    with pytest.raises(ValueError):
        grade_numeric("1 GB", 1, "GB", full_tol=0.3, partial_tol=0.2)


def test_parse_quantity():
    assert parse_quantity("1 GiB", "MiB") == (1024.0, "")
    value, message = parse_quantity("lots", "GB")
    assert value is None and "no number" in message


def test_numeric_zero_expected_uses_abs_tol():
    assert grade_numeric("0 GB", 0, "GB").score == 1.0
    assert grade_numeric("0.01 GB", 0, "GB").score == 0.0
    assert grade_numeric("0.01 GB", 0, "GB", abs_tol=0.05).score == 1.0


# ------------------------------------------------------------------ choice
def test_single_choice():
    assert grade_choice("B", "b").score == 1.0
    assert grade_choice("(b)", "B", options="abcd").score == 1.0
    assert grade_choice("c", "b").score == 0.0
    r = grade_choice("b, c", "b")
    assert r.score == 0.0 and "exactly one" in r.feedback[0]
    assert grade_choice("", "b").score == 0.0
    assert "the answer is b" in grade_choice("c", "b").feedback[0]
    assert "the answer" not in " ".join(grade_choice("c", "b", reveal=False).feedback)
    assert grade_choice(2, 2).score == 1.0


@pytest.mark.parametrize("answer,score", [
    (["a", "c"], 1.0),
    ("a, c", 1.0),
    ("C and A", 1.0),
    ({"a"}, 0.5),
    (["a", "b"], 0.0),          # 1/2 - 1/2
    (["a", "c", "b"], 0.5),     # 2/2 - 1/2
    (["a", "b", "c", "d"], 0.0),  # ticking every box earns nothing
    ("a a c", 1.0),             # a repeated pick counts once
    ([], 0.0),
    (["a", "z"], 0.0),
])
def test_multiple_choice_partial_credit(answer, score):
    r = grade_choice(answer, ["a", "c"], options=["a", "b", "c", "d"])
    assert r.score == pytest.approx(score), r.report()


def test_choice_labels_with_spaces():
    options = ["mixed precision", "checkpointing", "smaller batch"]
    correct = ["mixed precision", "checkpointing"]
    assert grade_choice("Mixed precision, checkpointing", correct, options=options).score == 1.0
    assert grade_choice("mixed precision and smaller batch", correct, options=options).score == 0.0


def test_choice_rejects_odd_input_without_raising():
    assert grade_choice(None, "a").score == 0.0
    assert grade_choice([None], ["a", "b"]).score == 0.0
    assert grade_choice(_EvilStr("x"), "a").score == 0.0
    assert "not an option: z" in grade_choice(["a", "z"], ["a", "c"], options="abcd").feedback
    with pytest.raises(ValueError):
        grade_choice("a", ["a", "e"], options="abcd")


# ------------------------------------------------------------------ ordering
TRIAGE = ["mixed precision", "checkpointing", "accumulation", "smaller batch"]


@pytest.mark.parametrize("answer,score", [
    (TRIAGE, 1.0),
    (" > ".join(TRIAGE), 1.0),
    (", ".join(TRIAGE), 1.0),
    (list(reversed(TRIAGE)), 0.0),
    (["checkpointing", "mixed precision", "accumulation", "smaller batch"], 4 / 6),  # one swap
    (["smaller batch", "mixed precision", "checkpointing", "accumulation"], 0.0),   # 3 of 6
    (TRIAGE[:3], 3 / 6),                                                            # one missing
    (TRIAGE + ["buy a gpu"], 0.8),                                                  # one extra
    (TRIAGE[:2] + TRIAGE[:2] + TRIAGE[2:], 4 / 6),                                 # duplicates
])
def test_ordering_pairwise_credit(answer, score):
    r = grade_ordering(answer, TRIAGE)
    assert r.score == pytest.approx(score), r.report()
    assert (r.score == 1.0) == (answer in (TRIAGE, " > ".join(TRIAGE), ", ".join(TRIAGE)))


def test_ordering_short_labels_and_bad_input():
    assert grade_ordering("b a c", ["b", "a", "c"]).score == 1.0
    assert grade_ordering("b -> c -> a", ["b", "a", "c"]).score == pytest.approx(1 / 3)
    assert grade_ordering(None, ["a", "b"]).score == 0.0
    assert grade_ordering([], ["a", "b"]).score == 0.0
    assert "the right order is a > b" in grade_ordering("b a", ["a", "b"]).feedback
    with pytest.raises(ValueError):
        grade_ordering("a", ["a", "a"])


# ------------------------------------------------------------------ Result
def test_points_and_report():
    r = Result(0.5, ["half"], kind="numeric")
    assert r.points(3) == 1.5 and type(r.points(3)) is float
    assert Result(1.0).points(2) == 2.0
    assert Result(0.999999).points(2) <= 2
    assert Result(float("nan")).score == 0.0 and Result(7).score == 1.0 and Result(-1).score == 0
    for bad in (0, -1, float("inf"), "2", True):
        with pytest.raises(ValueError):
            r.points(bad)
    flagged = Result(0.5, ["x"], needs_review=True, review_reason="borderline")
    assert flagged.report().startswith("[needs review]")
    assert flagged.as_dict()["review_reason"] == "borderline"


# ------------------------------------------------------------------ property-style
_ALPHABET = (list("abcdefghijklmnopqrstuvwxyz0123456789 ,.;:!?-'()^%/\n") +
             ["\u200b", "é", "ß", "’", "—", "GiB", "GB", " not ", " no ", " free ",
              " recompute ", " bf16 ", " fp16 ", " batch ", " zero_grad "])


def test_points_are_read_by_nbgrader_as_partial_credit():
    utils = pytest.importorskip("nbgrader.utils", reason="nbgrader is not installed")
    for score, max_points in ((1.0, 2), (0.5, 3), (0.0, 1), (2 / 3, 1.5)):
        points = Result(score).points(max_points)
        output = {"data": {"text/plain": repr(points)}}   # what the test cell displays
        assert utils.get_partial_grade(output, max_points) == pytest.approx(score * max_points, abs=0.01)


def test_scores_always_in_unit_interval(capsys):
    rng = random.Random(0)
    words = [w for sets in LABELLED.values() for a in sets["strong"] + sets["wrong"]
             for w in a.split()]
    rubrics = list(RUBRICS)
    for _ in range(400):
        if rng.random() < 0.5:
            answer = " ".join(rng.choice(words) for _ in range(rng.randint(0, 140)))
        else:
            answer = "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(0, 300)))
        results = [grade_text(answer, rng.choice(rubrics)),
                   grade_numeric(answer, rng.choice([0.5, 24, 1e9]), rng.choice(["GB", "GiB", "B"])),
                   grade_choice(answer, rng.choice(["a", ["a", "c"]])),
                   grade_ordering(answer, ["a", "b", "c"])]
        for r in results:
            assert 0.0 <= r.score <= 1.0 and isinstance(r.feedback, list)
            assert 0.0 <= r.points(5) <= 5.0
    # nbgrader zeroes a test cell that writes to stderr: grading must stay silent
    assert capsys.readouterr().err == ""


def test_grading_emits_no_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for rid, sets in LABELLED.items():
            for answer in sets["strong"] + sets["stuffed"] + EMPTY:
                grade_text(answer, rid)
        grade_numeric("24G", 24, "GB")
        grade_choice("a, b", ["a"])
        grade_ordering("b > a", ["a", "b"])


# ---------------------------------------------- oom_before_batch: what mixed precision shrinks
_REST = (" Then checkpointing trades extra compute for activation memory, accumulation over "
         "micro-batches keeps the effective batch size, and a smaller batch is the last resort "
         "because it changes the training dynamics.")


@pytest.mark.parametrize("claim", [
    "I would use bf16 autocast: it halves the weights, the gradients and the Adam moments.",
    "With mixed precision the weights, grads and Adam moments all shrink 2x.",
    "fp16 mixed precision halves the optimizer state.",
])
def test_mixed_precision_does_not_halve_the_weights_or_adam(claim):
    """Under autocast the weights, their gradients and Adam's moments stay fp32 (notebook 03):
    an answer claiming they halve loses points and names the misconception."""
    r = rb.grade_text(claim + _REST, "oom_before_batch")
    assert r.score < 0.75 and r.needs_review, r.report()
    assert "claims mixed precision halves the weights or the optimizer state" in r.report()


@pytest.mark.parametrize("claim", [
    "bf16 autocast halves the activations; the weights and the optimizer state stay fp32.",
    "Mixed precision does not halve the weights or the optimizer state, only the activations.",
    "Mixed precision stores activations in 2 bytes instead of 4. An 8-bit optimizer shrinks "
    "optimizer state.",
])
def test_the_true_statement_is_not_the_misconception(claim):
    r = rb.grade_text(claim + _REST, "oom_before_batch")
    assert "claims mixed precision halves" not in r.report(), r.report()
    assert r.score >= 0.75, r.report()


@pytest.mark.parametrize("claim, rid, name", [
    ("bf16 has fp32's exponent range, so it needs no scaling, but it is less precise than fp16.",
     "fp16_loss_scaling", "says bf16 is more precise than fp16"),
    ("bf16 keeps fp32's range; fp16 has more mantissa bits, so it is more precise than bf16.",
     "fp16_loss_scaling", "says bf16 is more precise than fp16"),
    ("It breaks with BatchNorm, but not with LayerNorm, which normalises each item on its own.",
     "accumulation_equivalence", "says LayerNorm depends on the micro-batch"),
    ("BatchNorm, unlike LayerNorm, uses statistics over the micro-batch, so it breaks "
     "accumulation.", "accumulation_equivalence", "says LayerNorm depends on the micro-batch"),
    ("The recomputation costs about one extra forward, so a step takes about a third longer, "
     "not double the time.", "checkpointing_cost", "says checkpointing doubles the step time"),
    ("A backward costs about twice a forward, so the extra forward adds a third.",
     "checkpointing_cost", "says checkpointing doubles the step time"),
    ("The activations grow with the batch, and so does the logits tensor.", "peak_moves",
     "says the model states (weights, gradients, optimizer state) grow with the batch"),
    ("Plain DDP on 8 GPUs, which splits the batch, keeps a full copy of the states.",
     "bytes_conventions", "says plain data parallelism (DDP) splits the model states"),
])
def test_the_true_comparison_is_not_the_misconception(claim, rid, name):
    r = grade_text(claim, rid)
    assert name not in r.misconceptions, r.report()


def test_the_model_answer_says_what_stays_fp32():
    answer = rb.get_rubric("oom_before_batch").model_answer
    assert "fp32 weights and optimizer state stay" in answer
    assert "activations and gradients" not in answer


# ------------------------------------------- every sentence accounted for (issue 32)
_CORE = {
    "accumulation_equivalence":
        "Gradients add up across backward calls, so summing the gradients of micro-batches whose "
        "losses are each divided by the number of micro-batches gives the mean over the whole "
        "batch, the same gradient as one big batch. ",
    "fp16_loss_scaling":
        "fp16 has only 5 exponent bits, so small gradients underflow to zero. Multiplying the "
        "loss by a large factor scales every gradient into range, and they are unscaled before "
        "the optimizer step. bf16 keeps fp32's 8 exponent bits, so it needs no scaler. ",
}


@pytest.mark.parametrize("rid, claim", [
    ("fp16_loss_scaling", "Loss scaling also halves the optimizer state in memory."),
    # (a claim the effects table checks is decided instead: "accumulation halves the
    # parameters" is a misconception, test_answer_blind.py)
    ("accumulation_equivalence", "Accumulation also doubles the time of each optimizer step."),
])
def test_a_technical_claim_no_pattern_checked_makes_the_score_provisional(rid, claim):
    """A right core plus one sentence the grader cannot check: the score stands provisionally,
    the learner sees the sentence quoted, and the instructor's review reason names it."""
    r = grade_text(_CORE[rid] + claim, rid)
    assert r.needs_review, r.report()
    assert f'I could not check this claim: "{claim}"' in r.report()
    assert "technical claim the grader could not check" in r.review_reason
    # without the extra sentence the same core is decided, with no such line
    core = grade_text(_CORE[rid], rid)
    assert "could not check" not in core.report(), core.report()


@pytest.mark.parametrize("rid", sorted(RUBRICS))
def test_model_answers_leave_no_sentence_unchecked(rid):
    r = grade_text(RUBRICS[rid].model_answer, rid)
    assert "could not check" not in r.report(), r.report()


def test_a_transition_or_a_hedge_is_not_a_claim():
    from memlab.grading.answers.concepts import _technical_claim
    assert not _technical_claim("that is the short answer")
    assert not _technical_claim("memory matters here")
    assert _technical_claim("bf16 halves the optimizer state")


def test_a_pattern_vouches_for_its_clause_not_the_whole_sentence():
    """The second clause of a sentence whose first clause earned a concept is its own claim: a
    decisive one (exactly as precise) that nothing matched is quoted for the instructor."""
    core = _CORE["fp16_loss_scaling"].replace(
        " bf16 keeps fp32's 8 exponent bits, so it needs no scaler. ", " ")
    answer = core + "bf16 keeps fp32's 8 exponent bits, so it is exactly as precise as fp32."
    r = grade_text(answer, "fp16_loss_scaling")
    assert r.needs_review and "could not check this claim" in r.report(), r.report()


@pytest.mark.parametrize("extra, flagged", [
    ("A scale of 65536 is a common start.", False),          # a number the rubric states
    ("A scale of 70000 is a common start.", False),          # within 15% of it
    ("GradScaler starts the scale at 3.5.", True),           # a number the grader can not check
])
def test_a_number_the_rubric_does_not_know_is_a_claim(extra, flagged):
    r = grade_text(_CORE["fp16_loss_scaling"] + extra, "fp16_loss_scaling")
    assert ("could not check this claim" in r.report()) is flagged, r.report()


# ------------------------------------------------------------------ list forms, topic, length
@pytest.mark.parametrize("sep", ["- {}\n", "* {}\n", "{}\n", "{}. ", "• {}\n", "{}; "])
def test_a_keyword_list_earns_nothing_whatever_marks_its_items(sep):
    """One term an item, bulleted, numbered, one a line or between semicolons, is a keyword
    list: the terms earn nothing however the items are marked (issue 32: "detected whatever
    separates them"; blind round r9: eleven terms between semicolons scored 1.00)."""
    terms = ["extra forward pass", "recompute in backward", "segment inputs only",
             "sqrt(n) memory", "compute for memory", "use_reentrant=False"]
    if sep == "{}. ":
        text = " ".join(f"{k + 1}. {t}" for k, t in enumerate(terms))
    else:
        text = "".join(sep.format(t) for t in terms)
    r = grade_text(text, "checkpointing_cost")
    assert r.score <= 0.2, r.report()


def test_clauses_joined_by_semicolons_are_prose_not_a_list():
    prose = ("Checkpointing keeps only the input of each segment; the activations inside are "
             "dropped; backward runs the segment's forward again to recompute them; that is about "
             "one extra forward pass, some 30% more time; so it pays only when memory, not "
             "compute, is the limit.")
    r = grade_text(prose, "checkpointing_cost")
    assert r.score >= 0.8 and "earns no credit" not in r.report(), r.report()


def test_a_list_of_sentences_is_graded_as_sentences():
    bullets = ("- Checkpointing keeps only the inputs of each segment and drops the rest.\n"
               "- In backward it runs each segment's forward again to recompute them.\n"
               "- That is about one extra forward pass, roughly 30% more time per step.\n"
               "- It is worth it only when memory, not compute, is the limit.\n"
               "- Otherwise the slowdown buys nothing.")
    r = grade_text(bullets, "checkpointing_cost")
    assert r.score >= 0.8, r.report()


def test_terse_notes_ending_in_full_stops_are_not_a_list():
    notes = ("allocated: live tensors only. reserved: the caching allocator's blocks, kept for "
             "reuse. nvidia-smi: reserved plus the CUDA context. A leak: allocated keeps growing.")
    r = grade_text(notes, "allocated_vs_reserved")
    assert r.score >= 0.7, r.report()


def test_an_answer_off_the_topic_earns_nothing_from_a_loose_word():
    """A word of an idea ("overhead", "time") in an answer that never speaks of the question's
    topic earns nothing, and the one-idea floor does not lift it."""
    r = grade_text("Kernel fusion in a compiler removes launch overhead and gives 1.5x speedups "
                   "for transformer blocks.", "checkpointing_cost")
    assert r.score == 0.0, r.report()
    assert any("never speaks of the question's topic" in line for line in r.feedback)


def test_a_long_answer_is_not_a_list_for_its_length():
    """Function words repeat in any long prose: the diversity rule scales with the count, so a
    correct answer of 250 words keeps its content's score less the length cost."""
    rb = RUBRICS["fp16_loss_scaling"]
    sentences = [rb.model_answer] + [
        "I think that is the heart of it, and it is worth saying it again in another way.",
        "When I first met this in a project I was surprised by how often it came up.",
        "The arithmetic in the forward pass is mostly fine; the trouble is in the backward.",
        "Most of the time the scaler is invisible, and you only notice it when it skips a step.",
        "It is one of those details that an interviewer likes to ask about.",
        "There are papers about it, and the framework documentation explains it well too.",
        "My colleagues used to forget it, then wonder why their runs went flat after a while.",
        "A quick way to see it is to print a histogram of gradient magnitudes early on.",
        "Newer accelerators made the second format common, which changed the advice people give.",
        "Frameworks hide most of this behind one context manager and one helper object.",
        "Still, knowing why it exists helps when something odd shows up in the logs.",
        "In short, the format decides whether you need the trick or not."]
    text = " ".join(sentences)
    assert len(text.split()) > rb.max_words
    r = grade_text(text, "fp16_loss_scaling")
    assert r.score >= 0.5, r.report()
    assert "keyword list" not in " ".join(r.feedback)


# ------------------------------------------------------------------ facts with a direction
_DIRECTION_CASES = [
    # (rubric, a wrong claim of the fact, the correct statement of the same fact, the wrong
    # claim denied)
    ("activations_scaling", "The weights and the Adam moments scale with the batch size.",
     "The activations scale with the batch size; the weights and the Adam moments do not.",
     "The weights and the Adam moments do not scale with the batch size."),
    ("peak_moves", "Gradients grow with the batch because every sample adds its own.",
     "Only the saved activations and the logits' gradient grow with the batch.",
     "Gradients never grow with the batch: there is one per parameter."),
    ("oom_before_batch", "Accumulation divides the optimizer state memory by k.",
     "Accumulation divides the activation memory by k, and the optimizer state stays whole.",
     "Accumulation does not divide the optimizer state memory by k."),
    ("sharding_when_why", "Plain DDP splits the optimizer states across the GPUs.",
     "ZeRO extends data parallelism by sharding the optimizer states across the GPUs.",
     "Plain DDP does not split the optimizer states across the GPUs."),
    ("kv_cache_tradeoff", "The KV cache grows quadratically with the sequence length.",
     "Without a cache, the work per token grows with the prefix; the cache grows linearly.",
     "The KV cache does not grow quadratically with the sequence length."),
    ("fp16_loss_scaling", "When the scaler finds an inf it doubles the scale.",
     "When the scaler finds an inf it skips the step and halves the scale.",
     "When the scaler finds an inf it never doubles the scale."),
]


def _direction_hits(rid: str, text: str) -> list[str]:
    from memlab.grading.answers.bank import DIRECTIONS

    names = {d.name for d in DIRECTIONS if rid in d.rubrics}
    return [m for m in grade_text(text, rid).misconceptions if m in names]


@pytest.mark.parametrize("rid,wrong,right,denied", _DIRECTION_CASES)
def test_a_fact_with_a_direction_costs_its_inverted_claim(rid, wrong, right, denied):
    """Issue 32, "claims with a direction": the right verb with the wrong subject, or the
    wrong direction, is a misconception; the correct statement of the same fact is not."""
    assert _direction_hits(rid, wrong), grade_text(wrong, rid).report()
    assert not _direction_hits(rid, right), grade_text(right, rid).report()
    assert not _direction_hits(rid, denied), grade_text(denied, rid).report()


def test_a_wrong_claim_in_the_questions_own_words_still_costs():
    """Words copied from the question earn no idea; a wrong claim made of them is still the
    learner's claim."""
    text = ("The peak after forward holds every saved activation. The gradients and the Adam "
            "moments depend on the batch size, so they grow at batch 16.")
    r = grade_text(text, "peak_moves")
    assert r.misconceptions, r.report()


@pytest.mark.parametrize("rid", sorted(RUBRICS))
def test_no_fact_with_a_direction_fires_on_the_course_text(rid):
    rb = RUBRICS[rid]
    for text in (rb.model_answer, rb.explanation, *rb.course_text):
        assert not _direction_hits(rid, text), f"{rid}: {text[:120]}"


def test_ticking_every_box_scores_nothing_however_many_options_are_right():
    """Blind hostile round r5 (a07): with three right options of four, "a and b and c and d"
    scored (3 - 1) / 3 = 0.67. Each wrong pick now costs a share of the wrong options, and a
    label that is no option is a wrong pick."""
    from memlab.grading.answers.choices import grade_choice

    opts = ["a", "b", "c", "d"]
    assert grade_choice("a and b and c and d", ["a", "b", "c"], options=opts).score == 0
    assert grade_choice("a/b/c/d/e", ["a", "b", "c"], options=opts).score == 0
    assert grade_choice(["a", "b", "c"], ["a", "b", "c"], options=opts).score == 1
    assert grade_choice("a", ["a", "b", "c"], options=opts).score == pytest.approx(1 / 3)
    assert grade_choice("a, b, e", ["a", "b", "c"], options=opts).score == 0  # e: no option
    assert grade_choice("a, d", ["a", "d"], options=["a", "b", "c", "d", "e"]).score == 1
    assert grade_choice("a, b, d", ["a", "d"], options=["a", "b", "c", "d", "e"]).score == \
        pytest.approx(1 - 1 / 3)
    # all but one option, the one left out wrong (r5 again, after the first fix): still a hedge
    assert grade_choice("a and b and c and d and e", ["a", "c", "e"], options="abcdef").score == 0
    # ... unless the key itself is all but one option
    assert grade_choice("a, b, c, d", ["a", "b", "c", "d"], options="abcde").score == 1


# ------------------------------------------------------------------ the question's parts
_WHY_ONLY = ("Differentiation is linear, so the gradient of the summed loss is the sum of the "
             "micro-batch gradients. backward() adds each micro-batch's gradient into p.grad, and "
             "each micro-batch loss is divided by k so the total is the mean.")


def test_an_answer_that_leaves_a_part_of_the_question_out_is_capped_and_decided():
    """ "Why are they equal, and when are they not?" answered with the why alone: at most one
    of two parts' worth (0.45), decided, since every claim of the answer was read; the learner
    is told which part is missing (blind rounds: partial answers decided at 0.8-1.0)."""
    r = grade_text(_WHY_ONLY, "accumulation_equivalence")
    assert r.score == pytest.approx(0.45) and not r.needs_review, r.report()
    assert "the question also asks: when they are not: not answered" in r.report()
    # answered whole, the same core is not capped
    whole = grade_text(_WHY_ONLY + " They differ with BatchNorm, whose statistics depend on the "
                       "micro-batch.", "accumulation_equivalence")
    assert whole.score > 0.45 and "the question also asks" not in whole.report(), whole.report()


def test_a_part_left_out_beside_a_sentence_the_grader_could_not_read_goes_to_review():
    """The part may be there in words no pattern knows: the cap is provisional and the reason
    quotes the sentence."""
    extra = "It uses the same memory for the optimizer state as the full batch does."
    r = grade_text(_WHY_ONLY + " " + extra, "accumulation_equivalence")
    assert r.needs_review and r.score == pytest.approx(0.45), r.report()
    assert "seems to leave out when they are not" in r.review_reason
    assert extra[:40] in r.review_reason


@pytest.mark.parametrize("rid", sorted(RUBRICS))
def test_the_model_answer_answers_every_part_of_its_question(rid):
    r = grade_text(RUBRICS[rid].model_answer, rid)
    assert r.score == 1.0 and "the question also asks" not in r.report(), r.report()


def test_a_part_must_name_the_rubrics_concepts():
    good = RUBRICS["accumulation_equivalence"]
    with pytest.raises(ValueError, match="no concept"):
        dataclasses.replace(good, parts=(("why", ("no such concept",)),))
