"""The course's short-answer rubrics, for :func:`memlab.grading.answers.grade.grade_text`.

Used by: the written questions of 01 (``peak_moves``, ``bytes_conventions``), 02
(``checkpointing_cost``), 03 (``fp16_loss_scaling``),
04 (``accumulation_equivalence``), 05 (``oom_before_batch``), 06 (``sharding_when_why``)
and 07 (interview prep: all eight rubrics; ``activations_scaling``,
``allocated_vs_reserved``, ``sharding_when_why`` and ``kv_cache_tradeoff`` were written for it), and the self-study
reveal of :mod:`memlab.grading.interview.panel` (``RUBRICS[id].model_answer`` /
``.explanation``, shown after an attempt; the text is public in this file anyway).

Patterns are matched against normalised text (see :func:`memlab.grading.answers.grade.normalize`):
lowercase, contractions expanded ("does not"), hyphens as spaces, ``fp16``/``bf16``/
``fp32`` spelled one way, and ``,`` / ``.`` as separate tokens. ``G(n)`` allows up to n
words in between, inside one clause and never over a negation. Each pattern is a vetted
phrasing; when an instructor finds a correct answer that a rubric missed, add the
phrasing here together with that answer as a labelled case in tests/grading/data/answers.jsonl.

Sources for the facts (each notebook cites them where it teaches them): Chen et al. 2016 for
checkpointing, Korthikanti et al. 2022 for the recompute cost, Micikevicius et al. 2018
for loss scaling, transformers#24725 and pytorch#46516 for accumulation pitfalls,
Korthikanti et al. 2022 for activations, PyTorch's CUDACachingAllocator and pytorch#40989 for
allocated vs reserved, Rajbhandari et al. 2020 (ZeRO) for sharding, Pope et al. 2022 and Ainslie et al. 2023
(GQA) for the KV cache; Rajbhandari et al. 2020 and Hugging Face's "Model training anatomy" for
the 16 vs 18 bytes per parameter of 01).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .concepts import Concept, Misconception, Rubric, gap

G = gap
_SHRINK = r"(?:reduc|lower|decreas|shrink|cut|halv|drop|smaller)\w*"
_BATCH = r"(?:batch|batches|batch size|bs)"
_BWD = r"(?:backward|backwards|backprop\w*|back propagation|the way back|back pass|reverse pass)"
# words that end "first ... reduce the batch" as a claim: "first X, then reduce the batch"
_NOT_SEQUENCE = ("then only before after if unless otherwise else instead and or "
                 "people most many others everyone beginners").split()

# ----------------------------------------------------------------------------- (a)
OOM_BEFORE_BATCH = Rubric(
    id="oom_before_batch",
    question=("You hit an out-of-memory error while training a large model. "
              "What would you try before reducing the batch size?"),
    concepts=(
        Concept("mixed precision (fp16/bf16)", (
            r"mixed precision", r"fp16", r"bf16", r"half precision", r"autocast", r"amp",
            r"(?:lower|reduced|low|16 bit) precision",
            r"16 bit (?:floats?|training|weights|activations|types?)",
        ), 0.75, "train in fp16/bf16 mixed precision"),
        Concept("lower precision roughly halves activation memory", (
            # halving said of the activations or of the precision, not any "halves" (a loose
            # word: "accumulation halves the gradient memory" is no mixed precision)
            rf"(?:activation\w*|precision|bf16|fp16|autocast|16 bits?|it|this|which) {G(6)}"
            r"(?:halv\w*|half(?! precision))",
            rf"(?:halv\w*|half(?! precision)) {G(4)}(?:activation\w*|them)",
            r"(?:2x|2 x|two ?fold|factor of (?:2|two)|twice) (?:saving|savings|reduction|less|"
            r"smaller|fewer|lower|cut)",
            r"(?:2|two) bytes (?:per \w+ )?(?:instead of|rather than|vs|versus|compared to|"
            r"not) (?:4|four)",
            r"(?:16|sixteen) bits? (?:instead of|rather than|vs|versus|compared to) (?:32|"
            r"thirty two)",
            r"50 ?% (?:less|smaller|fewer|of the memory|reduction|saving)",
        ), 0.75, "say what it saves: activations in 2 bytes instead of 4 (under autocast the fp32 "
                 "weights, their gradients and the optimizer state stay as they are)"),
        Concept("gradient checkpointing", (
            r"(?:gradient|activation)s? checkpoint\w*", r"checkpointing", r"re ?comput\w*",
            r"re ?calculat\w*",
            r"rematerial\w*",
            r"torch\.utils\.checkpoint",
            r"checkpoint_sequential",
        ), 0.75, "gradient (activation) checkpointing"),
        Concept("checkpointing trades extra compute for activation memory", (
            rf"trad\w* {G(3)}(?:compute|computation|time|speed|flops|"
            rf"recomputation) for {G(2)}memory",
            rf"(?:compute|computation|time|speed) for {G(1)}memory",
            r"(?:extra|additional|more|some|redundant) (?:forward )?(?:compute|computation|flops|"
            r"work|time|forward pass\w*)",
            rf"re ?comput\w* {G(5)}(?:during|in|on|at|for) (?:the )?{_BWD}",
            rf"(?:cost|costs|price|expense) {G(3)}(?:compute|time|speed|recomputation|slower)",
            r"slower|slows? \w* ?down|takes? longer",
            r"\d+ ?% (?:more|extra|slower|longer|overhead)",
        ), 0.75, "say what checkpointing costs: recomputing activations in backward (~30% more time)"),
        Concept("gradient accumulation", (
            r"(?:gradient|grad)s? accumulat\w*",
            rf"accumulat\w* {G(3)}(?:gradients?|grads|over|across|for)",
            rf"(?:sum|summ\w*|add\w*) {G(2)}(?:gradients|grads) (?:over|across|from|"
            rf"of) {G(2)}(?:several|multiple|many|k|n|a few|smaller|micro)",
            r"micro ?batch\w*",
            rf"(?:step|update)s? {G(3)}(?:every|after|once per|once every) {G(2)}(?:k|n|\d+|few|"
            rf"several|multiple) {G(2)}(?:batch\w*|steps|iterations)",
        ), 0.75, "gradient accumulation over micro-batches"),
        Concept("the effective batch size is kept", (
            r"effective (?:global )?batch\w*",
            r"(?:simulat|emulat|mimic|imitat|reproduc|recreat|approximat|get|gets|"
            rf"achiev)\w* {G(2)}(?:larger|bigger|big|full|original|whole|large|"
            rf"same) {G(1)}batch\w*",
            rf"(?:keep|keeps|kept|keeping|preserv\w*|maintain\w*|retain\w*) {G(2)}(?:same|original|"
            rf"full|overall|total|global|desired|target|current) {G(1)}batch",
            rf"(?:keep|keeps|kept|keeping|preserv\w*|maintain\w*|retain\w*) {G(1)}batch size",
            rf"(?:same|equivalent|identical|equal) {G(3)}(?:as|to) {G(2)}(?:larger|bigger|big|full|"
            r"original|whole|large) batch",
            r"(?:same|overall|total|global|full) (?:total |overall |global |effective )?batch size",
            r"same (?:total|overall|global|effective) batch|(?:total|overall|global) batch",
            rf"(?:optimi[sz]er|update|step) {G(2)}(?:sees|uses|gets) {G(3)}(?:same|full|whole|"
            rf"large|larger|big|bigger|original) {G(1)}batch",
            rf"(?:large|larger|big|bigger|full|original|same) batch {G(2)}(?:for|"
            r"to) (?:the )?optimi[sz]er",
            rf"batch size {G(2)}(?:stays|remains|is unchanged|unchanged|the same)",
        ), 0.5, "accumulation keeps the effective batch the optimizer sees"),
        Concept("a smaller batch comes last", (
            r"last resort",
            r"only (?:as a )?(?:fall ?back|last (?:option|step|thing))",
            r"fall ?back|last option",
            rf"only (?:then|after|if|when) {G(6)}{_SHRINK} {G(2)}{_BATCH}",
            rf"{_SHRINK} {G(2)}{_BATCH} {G(3)}(?:last|at the end|only if|only when|only after)",
        ), 0.5, "put the smaller batch last"),
        Concept("why: a smaller batch changes training dynamics and GPU utilisation", (
            r"(?:training|learning|optimi[sz]ation|convergence) (?:dynamics|behaviou?r|stability)",
            r"dynamics",
            r"(?:under ?)?utili[sz]\w*",
            r"throughput|idle|inefficien\w*|less efficient\w*",
            r"noisier|noisy|noise",
            rf"(?:retun\w*|re tun\w*|tun\w*|adjust\w*|rescal\w*|chang\w*) {G(3)}(?:learning rate|"
            r"lr|hyper ?parameters?)",
            rf"(?:learning rate|lr|hyper ?parameters?) {G(3)}(?:retun\w*|re tun\w*|tuned|adjusted|"
            r"rescaled|changed|change)",
            rf"(?:tied|coupled|linked|interacts?|depends?) {G(3)}(?:learning rate|lr|"
            r"hyper ?parameters?|schedule)",
            rf"gpu {G(3)}(?:busy|saturated|fed|occupied)",
            r"converg\w*",
            r"(?:hurts?|affects?|changes?|alters?|harms?|worsens?|impacts?|"
            rf"degrades?) {G(3)}(?:accuracy|generali[sz]ation|results|quality)",
        ), 0.75, "say why the batch is the last lever: it changes the training dynamics and GPU utilisation"),
        Concept("other levers: optimizer state, sharding, offloading, fused attention", (
            r"8 ?bit (?:adam|optimi[sz]er\w*)", r"bitsandbytes", r"adafactor",
            r"(?:smaller|lighter|cheaper|leaner|memory efficient|stateless) optimi[sz]er",
            r"optimi[sz]er (?:state|states|memory)",
            rf"(?:switch\w*|mov\w*|go|going|chang\w*) {G(2)}sgd",
            r"zero (?:1|2|3|stage|offload|redundancy)\w*",
            r"deepspeed|fsdp|fully sharded",
            r"shard\w*",
            r"(?:model|tensor|pipeline) parallel\w*", r"offload\w*",
            r"(?:flash|memory efficient|fused) attention|sdpa|scaled_dot_product_attention",
            rf"(?:split|spread|distribut)\w* {G(3)}model {G(2)}(?:across|over|between|"
            rf"onto) {G(2)}(?:gpus|devices)",
        ), 0.5, "smaller optimizer state (8-bit Adam), sharding (ZeRO/FSDP) or offloading"),
    ),
    misconceptions=(
        Misconception("reduces the batch size first", (
            rf"first {G(4, _NOT_SEQUENCE)}{_SHRINK} {G(2)}{_BATCH}",
            rf"{_SHRINK} {G(2)}{_BATCH} {G(2)}(?:first|straight away|right away|immediately|"
            r"to start)",
            rf"(?:start|begin)\w* (?:by|with) {G(2)}{_SHRINK} {G(2)}{_BATCH}",
            rf"first (?:thing|step|option|fix|move) {G(3, _NOT_SEQUENCE)}{_SHRINK} {G(2)}{_BATCH}",
            rf"just {_SHRINK} {G(2)}{_BATCH}",
        ), 0.35, "try mixed precision, checkpointing and accumulation first; a smaller batch "
                 "changes the training dynamics and GPU utilisation", fatal=True),
        Misconception("confuses mixed precision with int8 quantisation of the weights", (
            r"int8",
            rf"quanti[sz]\w* {G(3)}(?:weights|model|parameters)",
            rf"(?:halv|reduc|shrink)\w* {G(2)}(?:the )?(?:parameters|weights) (?:to|in) (?:8|int8)",
        ), 0.3, "mixed precision runs the matmuls and activations in 16-bit floats; int8 quantisation "
                "is another technique"),
        # Notebook 03: under autocast the weights stay fp32, so do their gradients and Adam's
        # two moments; only what is computed in 16 bits (activations) shrinks.
        Misconception("claims mixed precision halves the weights or the optimizer state", (
            # "bf16 autocast: it halves the weights" (a colon is a clause break: cross one)
            rf"(?:mixed precision|bf16|fp16|autocast|amp|16 bit|half precision|lower precision) "
            rf"(?:{G(3)}\. )?{G(5)}(?:halv\w*|shrink\w*) {G(2)}"
            r"(?:weights|master weights|parameters|"
            r"model states|optimi[sz]er states?|adam(?: s)? (?:states?|moments))",
            # "with mixed precision the weights, grads and Adam moments all shrink 2x": a list in
            # one clause, so the words between may hold commas (not a clause break)
            # "mixed precision (bf16 autocast): parameters, gradients and optimizer state take 2
            # bytes" (the colon is a clause break: cross one)
            r"(?:mixed precision|bf16|fp16|autocast|amp|16 bit|half precision|lower precision)"
            r"[^.]*?(?: \. [^.]*?)? (?:weights|parameters|model states|optimi[sz]er states?|moments) "
            rf"{G(3, negations=False)}"
            r"(?:halv\w*|shrink\w*|take (?:2|two) bytes|(?:are|is) (?:2|two) bytes|"
            r"(?:go|goes|drop\w*|fall\w*|shrink\w*) to (?:2|two) bytes|"
            r"(?:stored|kept|held) in (?:2|two) bytes)",
            # "mixed precision, which halves every consumer": all memory, the weights included
            r"(?:mixed precision|bf16|fp16|autocast|amp|16 bit|half precision|lower precision)"
            r"[^.]*? (?:halv\w*|cuts? in half) (?:every|all|each) (?:of the )?(?:consumers?|memory|"
            r"kinds?|parts?|tensors?|things?|buffers?)\b",
        ), 0.3, "under autocast the weights stay fp32, and so do their gradients and Adam's two "
                "moments (notebook 03): mixed precision shrinks the activations"),
        Misconception("confuses gradient checkpointing with saving checkpoints to disk", (
            rf"(?:sav|writ|dump|stor)\w* {G(3)}checkpoints? {G(3)}(?:to|on) {G(1)}(?:disk|drive|"
            r"file|ssd)",
            rf"(?:sav|writ|dump)\w* {G(2)}(?:model|weights|checkpoints?) {G(2)}(?:more )?(?:often|"
            r"frequently)",
        ), 0.3, "gradient checkpointing recomputes activations in backward; it has nothing to do "
                "with saving the model to disk"),
    ),
    topic=(r"memory", r"batch\w*", r"precision", r"checkpoint\w*", r"accumulat\w*", r"gradients?",
           r"activations?", r"gpu", r"oom|out of memory"),
    full_credit_at=0.75,
    course_text=(
        'Recap (05): an out-of-memory error is a message to read before it is a problem to fix. The levers differ in what they cost: precision costs little, recomputation costs time, accumulation costs more, smaller passes (the optimizer steps as often as before), a smaller batch changes the training itself.',
        'Read the error: the breakdown printed at the failure says which consumer dominates.',
        'Mixed precision (bf16 autocast; notebook 03): activations in 2 bytes instead of 4.',
        'Activation checkpointing (notebook 02), only where memory binds: it costs a recomputation in every backward.',
        'Gradient accumulation (notebook 04): smaller micro-batches, the same effective batch.',
        'A smaller optimizer state, where the recipe allows it; a smaller batch only as the last resort, because it changes the training itself.',
    ),
    model_answer=(
        "First bf16 (or fp16 with a GradScaler) mixed precision: the activations saved for "
        "backward take 2 bytes instead of 4, roughly halving them, while the fp32 weights and "
        "optimizer state stay. Then gradient checkpointing: "
        "keep only some layer inputs and recompute the rest during backward, trading about "
        "30% more compute for much less activation memory. Then gradient accumulation over "
        "micro-batches, which keeps the effective batch size. An 8-bit optimizer or sharding "
        "(ZeRO/FSDP) shrinks optimizer state. Reducing the batch is the last resort, because "
        "it changes the training dynamics and lowers GPU utilisation."),
    explanation=(
        "Activations usually dominate and scale with the batch, so the levers that cut them "
        "(lower precision, recomputation) or split the batch without changing what the "
        "optimizer sees (accumulation) come before a smaller batch, which changes the "
        "gradient noise, the tuned learning rate and the GPU's efficiency."),
)

# ----------------------------------------------------------------------------- (b)
_ACTS = (r"(?:activations?|intermediates?|outputs?|feature maps|tensors"
         r"|intermediate (?:values|results|outputs|tensors|activations))")
CHECKPOINTING_COST = Rubric(
    id="checkpointing_cost",
    question=("Why does gradient checkpointing reduce memory at the cost of training time, "
              "rather than being a free optimization?"),
    concepts=(
        Concept("activations are not stored: only segment inputs are kept", (
            r"(?:not|never|no longer|without|instead of|rather than|avoid\w*|"
            rf"skip\w*) {G(1)}(?:stor|keep|kept|sav|hold|cach|retain|remember|"
            rf"buffer)\w* {G(3)}{_ACTS}",
            rf"{_ACTS} {G(4)}(?:are|is|were|was|get|gets|being) (?:not|never|"
            rf"no longer) {G(1)}(?:stored|kept|saved|cached|held|retained)",
            r"(?:discard|drop|free|freed|freeing|throw\w*|threw|delet|releas|forget|forgot|"
            rf"evict)\w* {G(4)}{_ACTS}",
            rf"{_ACTS} {G(4)}(?:are|is|were|was|get|gets) (?:discarded|dropped|freed|thrown away|"
            r"deleted|released|forgotten)",
            r"(?:cach|stor|keep|sav|hold)\w* (?:only )?(?:a few|some|a subset|a handful)",
            rf"only {G(3)}(?:inputs?|boundar\w*|checkpoints?) {G(2)}(?:survive\w*|remain\w*|"
            r"stay\w*)",
            r"(?:keep|keeps|kept|store|stores|stored|save|saves|saved|hold|holds|retain\w*|"
            rf"remember\w*) (?:only|just) {G(3)}(?:inputs?|boundar\w*|checkpoints?|some|a few|"
            r"a subset|few|selected|certain)",
            rf"only {G(3)}(?:inputs?|boundar\w*|checkpoints?|a few|a subset|selected|certain|"
            rf"some) {G(3)}(?:are |is |get )?(?:kept|stored|saved|held|retained|remembered)",
            rf"(?:stores?|keeps?|saves?|remembers?) {G(2)}(?:inputs?|boundar\w*) (?:of|to|"
            rf"at) {G(2)}(?:segment|block|layer|checkpoint)\w*",
            rf"(?:stor|sav|keep)\w* (?:fewer|less|not all|only some|only a few) {G(1)}{_ACTS}",
            rf"(?:not|never|no longer|without|instead of) {G(1)}(?:stor|keep|sav|hold|cach|retain)\w* "
            r"(?:on to |onto )?(?:what|everything|all|most|each|every)",
            rf"only {G(2)}inputs? (?:of|to) (?:each|every|the) {G(1)}(?:segment|block|layer|checkpoint|fn)\w*",
            rf"(?:fewer|less|not all|not every) {G(1)}{_ACTS} {G(3)}(?:stored|kept|saved|in memory|"
            r"held)",
        ), 1.0, "say what is saved: most activations are dropped, only segment inputs are kept"),
        Concept("the dropped activations are recomputed", (
            r"re ?comput\w*",
            r"re ?calculat\w*",
            r"rematerial\w*|regenerat\w*|rebuil\w*|reconstruct\w*",
            r"(?:comput|calculat|produc|generat|creat|evaluat|deriv)\w* (?:again|anew|a second time|"
            r"once more|twice|another time)",
            r"re ?creat\w*|re ?evaluat\w*|re ?run\w*|re ?execut\w*|re ?do(?:es|ne|ing)? the forward",
            r"(?:run|runs|ran|running|do|does|doing|perform\w*|execut\w*|comput\w*|calculat\w*|"
            rf"redo\w*|repeat\w*) {G(3)}(?:forward|activations?|them|it|segment|block|layers?|"
            rf"parts?) {G(3)}(?:again|twice|a second time|another time|once more)",
            r"(?:second|repeated) forward(?: pass\w*| computation)?",
            rf"forward {G(3)}(?:twice|again|a second time|two times)",
            rf"(?:re ?do(?:es|ne|ing|s)?|repeat\w*) {G(3)}(?:forward|activations?|computation|work|"
            r"segments?|blocks?|layers?)",
        ), 1.0, "say that the dropped activations are recomputed by running the forward again"),
        Concept("the recomputation happens during the backward pass", (
            rf"(?:during|in|on|at|for|when) {G(2)}{_BWD}",
            rf"(?:{_BWD}|gradient computation) {G(3)}(?:needs?|requires?|reaches?|uses?|comes|gets|"
            r"re ?runs?|recomputes?|redoes|calls?)",
            rf"(?:when|once|as|where) {G(4)}(?:needed|required|used) (?:for|by|in|"
            rf"during) {G(2)}(?:gradient\w*|{_BWD})",
            rf"(?:when|once) {G(3)}(?:gradients?|grads) (?:are|is|get) {G(1)}(?:computed|"
            r"calculated|needed)",
        ), 0.5, "when: during the backward pass, where the activations are needed"),
        Concept("it costs extra compute / time", (
            r"(?:extra|additional|more|redundant|increased|higher|added|"
            rf"repeated) {G(1)}(?:compute|computation|computations|flops|work|time|cost|forward|"
            r"calculations?|processing|overhead)",
            r"slower|slows? \w* ?down|slow down|takes? longer|longer (?:training|steps?|"
            r"iterations?|runs?|epochs?)|overhead",
            rf"(?:cost|costs|pay|pays|paying|price|expense|trad\w*) {G(3)}(?:compute|computation|"
            r"time|speed|flops|recomputation|cycles)",
            rf"(?:compute|computation|time|speed|flops) for {G(1)}memory", r"trade ?offs?",
            r"times (?:the|as much) (?:work|compute|computation|time|flops)",
            r"(?:more|extra|additional) work",
            rf"(?:increas|rais|add)\w* {G(3)}(?:training time|compute|computation|run ?time|"
            r"step time|time)",
        ), 1.0, "say what it costs: extra computation, so each step takes longer"),
        Concept("how big the trade is: ~one extra forward (+20-40% time), memory ~sqrt(n)", (
            r"(?:one|1|an|a single|roughly one|about one) (?:extra|additional|more|second) forward",
            r"(?:two|2) forward passes|forward (?:pass )?twice",
            r"~? ?[2-4]\d(?: ?(?:to|-|/) ?[2-5]\d)? ?(?:%|percent)",
            r"(?:a|one) third|1\.3\d?x|4/3", r"sqrt\w*|square root|sub ?linear|o ?\( ?sqrt",
        ), 0.5, "size the trade: about one extra forward pass (20-40% more time)"),
        Concept("worth it only when memory is the binding constraint", (
            r"(?:worth|useful|makes? sense|pays? off|beneficial|helps?|use it|apply it|"
            rf"appropriate|justified|sensible) {G(4)}(?:when|if|where|once) {G(4)}(?:memory|oom|"
            r"out of memory|vram)",
            r"binding constraint",
            rf"(?:only|just) (?:when|if|where) {G(4)}(?:does not|do not|would not|will not|can not|"
            r"did not|otherwise does not) fit",
            rf"(?:when|if|once) {G(4)}(?:does not|do not|would not|will not|can not) fit",
            r"(?:not|never) by default|(?:turn|switch)\w* it on only|only (?:turn|switch|enabl)\w*",
            rf"(?:run|runs|running|ran) out of {G(1)}memory",
            rf"memory {G(2)}(?:is|becomes|being) {G(2)}(?:bottleneck|binding|limiting|constraint|"
            r"limit|problem|issue)",
            r"(?:memory|vram) ?(?:bound|limited|constrained)",
            rf"(?:if|when) {G(3)}(?:plenty of|enough|spare) memory",
            rf"(?:short|running out|run out|tight) (?:on|of) {G(1)}memory",
            rf"(?:compute|speed|time) {G(2)}(?:is|are) {G(2)}(?:bottleneck|constraint|limit)",
            rf"(?:not|no) {G(1)}(?:memory )?(?:bound|constrained|limited)",
            r"(?:not|never) everywhere|(?:wasted|waste of (?:time|compute))",
            rf"(?:if|when|unless) {G(4, negations=True)}(?:memory|"
            rf"vram) {G(3, negations=True)}(?:bottleneck|binding|limit\w*|constraint|problem|"
            r"issue)",
            rf"(?:if|when) {G(4)}(?:not|never) {G(2)}(?:running|run) out of memory",
        ), 1.0, "say when it is worth it: only when memory, not compute, is the binding constraint"),
    ),
    misconceptions=(
        Misconception("says activations are written to disk, offloaded or compressed", (
            r"disk|disks|ssd|hard drive|nvme|(?:cpu|host) (?:ram|memory)|offload\w*|"
            r"swap\w* (?:to|out)|page\w* out|i/o",
            rf"(?:compress|quantiz|encod)\w* {G(3)}(?:activations?|tensors?|them)",
            rf"(?:activations?|tensors?) {G(3)}(?:in|to|as) (?:fp16|half precision|8 bits?|int8|"
            r"lower precision)",
        ), 0.5, "nothing leaves the GPU and nothing is compressed: the activations are dropped "
                "and recomputed", fatal=True),
        Misconception("checkpointing is free", (
            rf"(?:is|are|be|comes) {G(2)}free\b(?! (?:up|memory|for|to))",
            r"free (?:optimi[sz]ation|lunch)",
            rf"(?:no|zero|without|without any) {G(1)}(?:extra |additional )?(?:compute|computation|"
            r"time|cost|overhead|slowdown|penalty|speed penalty)\b",
            rf"(?:does|do|will) not {G(1)}(?:slow|cost|increase|add|hurt) {G(3)}(?:training|time|"
            r"speed|compute|anything|performance|runtime|throughput)",
        ), 0.35, "it is not free: the dropped activations are recomputed, about one extra "
                 "forward pass", fatal=True),
        Misconception("says it reduces parameter memory", (
            rf"(?:reduc|lower|shrink|cut|compress|decreas|halv)\w* {G(4)}(?:parameters?|weights|"
            r"model size|model parameters|weight memory|parameter memory)",
            rf"(?:sav|free)\w* {G(2)}memory (?:on|of|for|used by) {G(1)}(?:parameters?|weights|"
            r"model)",
            rf"(?:parameters?|weights) {G(3)}(?:are|is|get) {G(1)}(?:recomputed|discarded|"
            r"not stored|dropped|freed|offloaded|compressed)",
            rf"(?:recomput|discard|drop)\w* {G(2)}(?:parameters|weights)",
        ), 0.35, "parameters stay in memory: checkpointing only drops activations", fatal=True),
        Misconception("says it reduces gradient memory", (
            rf"(?:reduc|lower|shrink|cut|compress|decreas|halv|discard)\w* {G(2)}(?:memory (?:of|"
            r"for|used by) )?(?:the )?gradients?\b(?! checkpoint)",
            rf"(?:sav|free)\w* {G(2)}memory (?:on|of|for|"
            rf"used by) {G(1)}gradients?\b(?! checkpoint)",
            rf"gradients? {G(3)}(?:are|is|get) {G(1)}(?:not stored|discarded|recomputed|dropped|"
            r"freed|compressed)",
            rf"(?:recomput|compress|quantiz)\w* {G(2)}gradients?\b(?! checkpoint)",
        ), 0.3, "gradients are still stored for every parameter: checkpointing drops activations"),
        Misconception("confuses it with offloading or saving to disk", (
            rf"(?:sav|writ|dump|offload|mov|copy|copi)\w* {G(4)}(?:to|on|onto) {G(1)}(?:disk|drive|"
            r"ssd|hard drive|cpu|host memory|ram)",
        ), 0.3, "nothing leaves the GPU: the activations are recomputed, not stored elsewhere"),
    ),
    topic=(r"activations?", r"memory", r"re ?comput\w*", r"forward", r"backward", r"time",
           r"compute|computation", r"stor\w*", r"checkpoint\w*"),
    course_text=(
        "Recap (02): torch.utils.checkpoint.checkpoint(fn, x, use_reentrant=False) keeps only the inputs of fn and recomputes the rest during backward. Chen et al. 2016: n equal layers in k segments peak at about (n/k + k) layers' worth of activations. Korthikanti et al. 2022, table 4: full recomputation added 39% to a layer's time.",
        'checkpoint only when the step does not fit (or to reach a batch or sequence length you need); checkpoint as few layers as makes it fit, selectively first (section 6); never by default.',
    ),
    model_answer=(
        "Backward needs the activations of the forward pass. Checkpointing keeps only the "
        "inputs of each segment and drops the activations inside it, which saves the memory. "
        "During backward each segment's forward is run again to recompute them: roughly one "
        "extra forward pass, about 20-40% more time per step. So it is a trade of compute for "
        "memory, worth it only when memory is the binding constraint."),
    explanation=(
        "Memory falls from all activations to the segment inputs plus one segment's "
        "activations (about 2*sqrt(n) layers' worth for n layers and sqrt(n) segments), "
        "while every dropped activation is computed twice. Parameters and gradients are "
        "untouched."),
)

# ----------------------------------------------------------------------------- (c)
_SCALER = r"(?:grad ?scaler|scaler|loss scal\w*|scaling|scale)"
FP16_LOSS_SCALING = Rubric(
    id="fp16_loss_scaling",
    question="Why does fp16 training need loss scaling and bf16 does not?",
    concepts=(
        Concept("fp16 has a narrow exponent range", (
            rf"fp16 {G(4)}(?:narrow\w*|small\w*|limited|tiny|restricted|low\w*|less|short\w*|"
            rf"reduced) {G(1)}(?:dynamic )?(?:range|exponent)",
            r"(?:narrow\w*|small\w*|limited|tiny|restricted|short\w*|reduced|less|"
            rf"low) {G(1)}(?:dynamic )?range (?:of|in|for) {G(1)}fp16",
            rf"fp16 {G(3)}(?:fewer|less|only 5|only five|just 5|just five) {G(1)}exponent",
            r"(?:5|five) (?:exponent bits?|bits? (?:of|for|on|in) (?:the |its )?exponent|bit exponent)",
            r"65 ?504|65k|6\.1e-0?5|2\^ ?-14",
            rf"(?:can not|unable to|not able to|fails? to) {G(1)}(?:represent|store|express|"
            rf"hold) {G(3)}(?:small|tiny|little)",
            rf"range {G(3)}(?:is|being) {G(2)}(?:narrow|small|limited|restricted)",
            rf"fp16 {G(5)}(?:dynamic )?range ,? ?not {G(2)}precision",
            rf"fp16 {G(4)}narrow\w*", rf"narrow\w* {G(3)}fp16",
            rf"exponent {G(3)}(?:is|being) {G(2)}(?:narrow|small|limited|short)",
            rf"(?:smallest|minimum|min) {G(3)}(?:representable|positive|subnormal|normal|value|"
            r"number)",
        ), 1.0, "say why: fp16 has only 5 exponent bits, a narrow range"),
        Concept("small gradients underflow to zero", (
            r"underflow\w*|under flow\w*",
            r"(?:flush|round|truncat|collaps|go|goes|become|turn|set|vanish|"
            rf"get)\w* {G(2)}(?:to )?(?:0|zero|zeros|zeroes)\b",
            rf"(?:small|tiny|little) {G(2)}(?:gradients?|grads|values|numbers|"
            rf"updates) {G(3)}(?:vanish\w*|lost|disappear\w*)",
            r"2\^ ?-24|5\.96 ?e-0?8|6(?:\.0)? ?e-0?8",
        ), 1.0, "say what goes wrong: small gradients underflow to zero in fp16"),
        Concept("scaling multiplies the loss so gradients become representable", (
            rf"multipl\w* {G(3)}(?:loss|gradients?|grads)",
            rf"(?:loss|gradients?|grads) {G(3)}multipl\w*",
            rf"scal\w* {G(3)}up\b",
            r"(?:large|big|huge|constant|scale|scaling) (?:factor|constant|number)",
            r"2\^ ?1\d|65536",
            rf"(?:shift|mov|push|bring|lift|keep)\w* {G(3)}(?:into|above|within|in) {G(3)}(?:range|"
            r"representable|zone|region)",
            rf"(?:gradients?|grads|values) {G(3)}(?:bigger|larger|big enough|large enough)",
            rf"(?:bigger|larger) {G(2)}(?:gradients?|grads)",
            r"(?:makes?|making|made|get|gets) (?:them|gradients?|grads|it|values|the gradients) "
            r"(?:bigger|larger|big enough|large enough)",
        ), 1.0, "say how scaling helps: the loss is multiplied by a large factor, so every "
                "gradient is shifted into fp16's range"),
        Concept("gradients are unscaled before the optimizer step", (
            r"un ?scal\w*",
            rf"divid\w* {G(4)}(?:by|with|out) {G(3)}(?:same|scale|factor|it)",
            rf"(?:undo|undone|undoes|revers\w*|remov\w*|cancel\w*) {G(3)}(?:scal\w*|factor|"
            r"multiplication)",
            rf"(?:scal\w*|factor) {G(3)}(?:undone|removed|reversed|cancel\w*|divided out)",
        ), 0.75, "the gradients are divided by the same factor before the step"),
        Concept("a dynamic scaler skips steps with inf/NaN and adapts the scale", (
            rf"dynamic\w* {G(2)}(?:loss )?scal\w*",
            rf"skip\w* {G(3)}(?:step|update|iteration|batch)\w*",
            rf"(?:inf|infs|nan|nans|infinit\w*|overflow\w*) {G(6)}(?:skip\w*|reduc\w*|lower\w*|"
            r"halv\w*|decreas\w*|back off)",
            r"(?:reduc|lower|halv|decreas|adjust|grow|increas|updat|tun|"
            rf"adapt)\w* {G(2)}scale(?: factor)?",
            rf"grad ?scaler {G(3)}(?:adjust|updat|chang|tun|grow|reduc|lower|adapt)\w*",
            r"scaler\.update",
        ), 0.5, "GradScaler halves the scale and skips the step when it finds inf/NaN"),
        Concept("bf16 has fp32's exponent range (8 exponent bits)", (
            rf"bf16 {G(5)}(?:same|similar|identical|equal|as wide|as large|as big|"
            rf"as much) {G(3)}(?:range|exponent\w*)",
            r"(?:8|eight) (?:exponent bits?|bits? (?:of|for|on|in) (?:the |its )?exponent|bit exponent)",
            rf"(?:exponent|range) {G(3)}(?:as|of|like) {G(1)}fp32",
            r"fp32 (?:exponent|range|dynamic range)",
            rf"(?:range|exponent\w*) (?:of|in|for) bf16 {G(3)}(?:same|similar|identical|equal|"
            rf"as wide|as large|like|matches) {G(2)}fp32",
            rf"(?:same|similar|identical|equal) {G(3)}(?:range|exponent\w*) {G(2)}(?:as|to|"
            rf"of) {G(1)}fp32",
            rf"bf16 {G(4)}(?:wide|wider|large|larger|big|bigger|huge|much more|"
            rf"more) {G(2)}(?:dynamic )?(?:range|exponent)",
            rf"(?:wide|wider|large|larger|bigger|more) {G(2)}(?:dynamic )?range {G(3)}bf16",
        ), 1.0, "say why bf16 is safe: it keeps fp32's 8 exponent bits, so the same range"),
        Concept("bf16 pays with fewer mantissa bits (less precision)", (
            rf"(?:less|lower|reduced|fewer|worse|coarser|poorer) {G(2)}(?:precision|mantissa|"
            r"significand|fraction bits|accuracy|precise)",
            r"(?:7|8|seven|eight|fewer|3 fewer) (?:bits? (?:of )?)?(?:mantissa|significand|"
            r"fraction)",
            rf"(?:precision|mantissa) {G(3)}(?:sacrific\w*|traded|lower|reduced|worse)",
            rf"trad\w* {G(3)}(?:precision|mantissa) for {G(2)}(?:range|exponent)",
        ), 0.5, "bf16's cost is precision (8 mantissa bits), not range"),
    ),
    misconceptions=(
        Misconception("says bf16 needs a GradScaler / loss scaling", (
            rf"bf16 {G(3)}(?:needs?|requires?|benefits from|should use|must use|"
            rf"needs to use) {G(2)}{_SCALER}",
            rf"(?:both|either) {G(4)}(?:needs?|requires?) {G(2)}{_SCALER}",
            rf"{_SCALER} {G(4)}(?:needed|required|necessary|essential) {G(3)}(?:for|with|"
            rf"in) {G(1)}bf16",
        ), 0.35, "bf16 has fp32's range, so gradients do not underflow and no scaler is needed "
                 "(GradScaler even fails on bf16 gradients)"),
        Misconception("says bf16 and fp16 have the same range or exponent", (
            rf"(?:both|bf16 and fp16|fp16 and bf16|they) {G(3)}(?:have|share|use) {G(2)}(?:same|equal|"
            rf"identical|similar) {G(1)}(?:dynamic )?(?:range|exponent\w*)",
            rf"both {G(3)}(?:have|use) {G(1)}(?:5|five|8|eight) (?:exponent bits?|bits? (?:of|for|on) "
            r"(?:the )?exponent)",
            rf"bf16 {G(3)}(?:same|identical|equal) {G(1)}(?:range|exponent\w*) (?:as|to) fp16",
        ), 0.35, "bf16 has 8 exponent bits (fp32's range), fp16 only 5: that difference is the "
                 "whole answer", fatal=True),
        Misconception("says fp16 has more range than bf16", (
            rf"fp16 {G(4)}(?:more|larger|wider|bigger|greater|higher) {G(2)}(?:dynamic )?range",
            rf"bf16 {G(4)}(?:less|smaller|narrower|lower|reduced|limited) {G(2)}(?:dynamic )?range",
            rf"bf16 {G(4)}(?:fewer|less) {G(2)}exponent",
        ), 0.35, "it is the other way round: bf16 has 8 exponent bits, fp16 only 5"),
        Misconception("says bf16 is more precise than fp16", (
            rf"bf16 {G(4)}(?:more|higher|better|greater) {G(1)}(?:precision|precise|accurate|"
            r"accuracy|mantissa)",
            rf"fp16 {G(4)}(?:less|lower|worse) {G(1)}(?:precision|precise|accurate)",
            # "bf16 keeps fp32's range ..., and it is also more precise than fp16": the
            # comparison's subject a pronoun for the dtype the sentence is about
            r"bf16 (?:(?!fp16\b)[^.]){0,160}\b(?:it|this|that) (?:is|s|has|offers|gives) "
            r"(?:also |even |much |slightly |a bit )?(?:more|higher|better|greater|finer) "
            r"(?:precision|precise|accurate|accuracy|mantissa\w*)",
        ), 0.3, "fp16 has more mantissa bits (10) than bf16 (7): bf16 wins on range, not precision"),
        Misconception("says the loss is scaled down to avoid overflow", (
            rf"(?:scal|divid|shrink|reduc)\w* {G(2)}loss (?:down|to avoid overflow|"
            r"to prevent overflow)",
            rf"loss scal\w* {G(3)}(?:prevents?|avoids?|stops?) {G(2)}overflow\w*",
        ), 0.25, "the loss is scaled up, against underflow; overflow only makes the dynamic "
                 "scaler lower the scale"),
    ),
    topic=(r"fp16", r"bf16", r"range", r"exponent\w*", r"gradients?", r"underflow\w*", r"scal\w*",
           r"precision", r"mantissa"),
    course_text=(
        'Recap (03): fp16 has a largest value of 65504, smallest normal 2⁻¹⁴ ≈ 6.10e-5 and smallest subnormal 2⁻²⁴ ≈ 5.96e-8 (Micikevicius et al. 2018). torch.amp.GradScaler("cuda") scales the loss, unscales before the step, skips steps with inf/NaN and adapts the scale.',
        'Training in 16-bit floats halves what you store per number. But it is not simply "use half the bytes": fp16 cannot hold the tiny gradients of a real network, bf16 cannot hold small weight updates, and PyTorch\'s automatic mixed precision (AMP) keeps some things in fp32 on purpose.',
    ),
    model_answer=(
        "fp16 has only 5 exponent bits, so its range is narrow: values below about 6e-8 "
        "(2^-24) underflow to zero, and many gradients are that small. Loss scaling "
        "multiplies the loss by a large factor so every gradient is shifted into fp16's "
        "range, then unscales the gradients before the optimizer step; GradScaler skips "
        "steps with inf/NaN and adjusts the scale. bf16 keeps fp32's 8 exponent bits, so it "
        "has the same range and gradients do not underflow; it pays with fewer mantissa bits."),
    explanation=(
        "Underflow is a range problem, and multiplying by a constant moves every gradient "
        "up the exponent scale without changing their ratios. bf16 spends its bits on "
        "exponent (8) rather than mantissa (7 vs fp16's 10), so it has fp32's range."),
)

# ----------------------------------------------------------------------------- (d)
_MB = r"(?:micro ?batch\w*|mini ?batch\w*|batches|chunks)"
ACCUMULATION_EQUIVALENCE = Rubric(
    id="accumulation_equivalence",
    question=("Why are gradients from k micro-batches with accumulation equal to the "
              "full-batch gradient, and when are they not?"),
    concepts=(
        Concept("the gradient is linear: the gradient of a sum/mean is the sum/mean of gradients", (
            r"linearity|linearly|linear (?:in|operator|operation|map|function)",
            r"(?:gradient|derivative)s? of (?:a|the) (?:sum|mean|average)",
            rf"(?:gradients?|derivatives?|differentiation|grads?|backward|backprop\w*|operator|"
            rf"it|loss) {G(3)}(?:is|are|being) {G(2)}linear",
            rf"(?:gradient|derivative|grad)s? {G(3)}(?:of|for) {G(2)}(?:sum|average|"
            rf"mean) {G(3)}(?:is|equals|are|=) {G(3)}(?:sum|average|mean)",
            rf"(?:sum|average|mean) of {G(3)}(?:per sample|per example|per token|individual|each|"
            rf"the) {G(2)}gradients",
            rf"(?:loss|gradient|objective) {G(3)}(?:is|are) {G(2)}(?:sum|average|mean) (?:over|of|"
            r"across)",
            r"additiv\w*", rf"(?:derivative|differentiation) {G(3)}(?:distribut|split)\w*",
        ), 1.0, "say why it works: the gradient of a sum (or mean) of losses is the sum (mean) "
                "of their gradients"),
        Concept("backward adds into .grad across micro-batches", (
            r"[a-z_]*\.grad",
            rf"(?:sum\w*|add\w*|accumulat\w*) {G(2)}(?:the )?(?:gradients?|grads) (?:of|from|over|"
            rf"across) {G(2)}(?:k |all |each |every |the )?(?:micro ?batch\w*|batches|chunks|pieces)",
            r"(?:backward|backprop\w*|autograd|pytorch|torch|gradients?|"
            rf"grads) {G(3)}(?:accumulat\w*|adds?|added|sums?|summed|add up|adds up) {G(3)}(?:in|"
            r"into|onto|to|across|over|between)",
            rf"(?:gradients?|grads) {G(3)}(?:accumulat\w*|summed|added|add up|sum up)",
            r"(?:not|never|instead of|rather than) (?:overwrit\w*|replac\w*|reset\w*)", r"\+=",
        ), 1.0, "say how: each backward adds into .grad instead of overwriting it"),
        Concept("each micro-batch loss is divided by k (weighted by its share)", (
            rf"divid\w* {G(3)}(?:loss|losses|it|each|gradients?|grads) {G(2)}by {G(3)}(?:k|number|"
            rf"accumulation|steps|n|{_MB})",
            rf"(?:loss|losses) {G(3)}(?:divided|scaled|normali[sz]ed|multiplied|"
            rf"weighted) {G(3)}(?:by|with) {G(2)}(?:k|1/k|number|count|accumulation|n|n_i|share|"
            r"fraction|proportion|size)",
            rf"weight\w* {G(3)}by {G(2)}(?:n_i|share|fraction|proportion|(?:its|their) (?:size|count|"
            r"number))",
            r"(?:loss|l) ?/ ?k|1 ?/ ?k",
            r"divid\w* (?:it |them |each |every |all )?by k\b",
            rf"(?:scal|normali[sz]|averag|weight)\w* {G(3)}(?:by|with|over|across) {G(3)}(?:k|1/k|"
            rf"number of|accumulation steps|{_MB})",
            rf"(?:mean|average) {G(2)}(?:over|of|across) {G(2)}(?:k|{_MB})",
        ), 1.0, "each micro-batch loss must be divided by k (or weighted by its share)"),
        Concept("zero_grad and step only at the accumulation boundary", (
            rf"zero_?grad\w* {G(4)}(?:only|once|after|every|at|before the next|per)",
            rf"(?:only|once) {G(4)}(?:zero_?grad\w*|zero\w* {G(2)}grad\w*|clear\w* {G(2)}grad\w*|"
            rf"reset\w* {G(2)}grad\w*)",
            rf"(?:not|never|without) {G(2)}(?:zero_?grad\w*|zero\w* {G(2)}grad\w*|"
            rf"clear\w* {G(2)}grad\w*|reset\w* {G(2)}grad\w*)",
            rf"(?:step|update|optimi[sz]er\.step|optimi[sz]er) {G(3)}(?:once|after|every|"
            rf"at the end|per) {G(3)}(?:k|accumulation|\d+|cycle|boundary|{_MB})",
            rf"(?:after|every|each) {G(2)}(?:k|kth|k th)\b {G(3)}(?:{_MB}|steps?|backward)",
            rf"only once (?:per|every|each|after) (?:k|\d+|n|the k th) {G(1)}(?:{_MB}|steps|iterations)",
        ), 0.75, "gradients are zeroed, and the optimizer steps, only once per k micro-batches"),
        Concept("unequal micro-batch sizes or token counts need weighting by count", (
            rf"(?:different|unequal|uneven|varying|variable|differing|differ) {G(3)}(?:sizes?|"
            r"lengths?|numbers? of|counts?|tokens?|samples)",
            r"(?:sizes?|lengths?|token counts?|number of tokens|"
            rf"numbers of tokens) {G(3)}(?:differ\w*|vary|varies|unequal|are different)",
            rf"(?:sizes?|lengths?|counts?) {G(3)}(?:are |is )?not (?:the same|equal)",
            rf"not {G(2)}(?:same|equal) (?:sizes?|lengths?)",
            rf"(?:last|final|partial|incomplete|remainder) (?:micro ?)?batch\w* {G(3)}(?:smaller|shorter|"
            r"fewer|partial|incomplete|different|uneven|less)",
            r"(?:smaller|shorter|partial|incomplete|uneven|short) (?:last|final) (?:micro ?)?batch\w*",
            r"pad\w*",
            r"token counts?|number of tokens|per ?token",
            rf"weight\w* {G(3)}(?:by|with) {G(3)}(?:count|size|number|tokens|samples)",
            r"mean of (?:the )?means|average of (?:the )?averages", r"not divisible|drop_last",
        ), 1.0, "when it breaks: micro-batches of different sizes or token counts must be "
                "weighted by their count"),
        Concept("BatchNorm statistics depend on the (micro-)batch", (
            r"batch ?norm\w*|bn (?:layers?|statistics|stats)|batch normali[sz]ation",
            r"running (?:mean|var\w*|stat\w*)",
            rf"(?:statistics|stats) {G(3)}(?:computed|calculated|estimated|taken) {G(3)}(?:per|"
            rf"over|on|across) {G(2)}(?:{_MB}|batch)",
            rf"layers? {G(4)}(?:depend|rely|look) {G(3)}(?:on|at|across) {G(2)}(?:whole |"
            r"other )?(?:batch|samples)",
        ), 1.0, "when it breaks: BatchNorm normalises with per-micro-batch statistics"),
        Concept("other sources of difference: dropout/randomness, float rounding, clipping", (
            r"dropout",
            r"random\w*",
            r"floating point|rounding|round off|numerical\w*|non ?associativ\w*",
            r"summation order|order of (?:summation|addition|operations)|bit (?:wise |exact|"
            r"identical)\w*",
            r"(?:gradient )?clipping", r"contrastive|in batch negatives?",
        ), 0.5, "also: dropout masks, float summation order, per-micro-batch clipping"),
    ),
    misconceptions=(
        Misconception("says backward overwrites .grad or that gradients are not linear", (
            rf"(?:backward|autograd|pytorch|it) {G(2)}(?:overwrit|replac|reset|clear)\w* {G(2)}"
            r"(?:the )?(?:[a-z_]*\.grad|gradients?|grads)",
            rf"(?:gradients?|differentiation|the gradient|backward|it) {G(2)}(?:is|are) (?:not|never) "
            r"linear",
            rf"(?:only|just) (?:keeps?|uses?|counts?) {G(1)}(?:the )?last (?:micro ?)?batch",
        ), 0.4, "backward adds into .grad, and the gradient of a sum is the sum of the gradients",
            fatal=True),
        Misconception("says they are always exactly equal", (
            r"(?:always|in all cases|in every case|no matter what|regardless|"
            rf"every time)\b {G(4)}(?:exactly |perfectly |completely )?(?:equal|identical|the same|"
            r"equivalent)",
            rf"(?:never|no case|no situation|no circumstances) {G(3)}(?:differ\w*|different)",
            r"(?:exact|equal|identical|the same) (?:in every case|in all cases|always|no matter what)",
            r"even with batch ?norm\w*",
        ), 0.35, "they match only with equal-weighted micro-batches and no batch-dependent "
                 "layers", fatal=True),
        Misconception("multiplies the micro-batch losses by k", (
            rf"multipl\w* {G(4)}(?:loss|losses) {G(2)}by k\b",
        ), 0.35, "each micro-batch loss is divided by k (weighted by its share), not multiplied",
            fatal=True),
        Misconception("calls zero_grad after every micro-batch", (
            rf"(?:call|calling|use|run|do)\w* {G(2)}zero_?grad\w* {G(4)}(?:after|before|for|on|at|"
            r"in) (?:each|every) (?:micro ?batch|backward|iteration|mini ?batch|batch|step)",
            rf"zero_?grad\w* {G(4)}(?:after|before|for|on|at|in) (?:each|every) (?:micro ?batch|"
            r"backward|iteration|mini ?batch)",
            rf"(?:reset|clear|zero)\w* {G(2)}(?:gradients?|grads) {G(4)}(?:after|before|for|"
            r"at) (?:each|every) (?:micro ?batch|backward|iteration)",
        ), 0.3, "zeroing after every micro-batch throws away the accumulated gradient"),
        Misconception("says LayerNorm depends on the micro-batch", (
            # "LayerNorm, like BatchNorm, normalizes with ...": a comparison set off by commas
            # says the same of both
            rf"(?:layer ?norm\w*|rms ?norm\w*|layer normali[sz]ation)(?: , (?:just )?(?:like|as "
            rf"with|as in|similar to) [^,.]{{1,30}} ,)? {G(6)}(?:breaks?|differ\w*|"
            rf"depends? on {G(2)}batch|(?:statistics|stats) of {G(2)}(?:micro ?)?batch|"
            rf"normali[sz]\w* (?:across|over) {G(2)}(?:samples|batch|items))",
            rf"(?:breaks?|not exact|differ\w*) {G(4)}(?:with|for|because of) (?:layer ?norm\w*|"
            r"rms ?norm\w*)",
            # "not exact with normalisation layers such as BatchNorm and LayerNorm, because they
            # compute their statistics over the micro-batch": named in one list, one claim
            r"(?:breaks?|not exact|not equal|not the same|differ\w*|statistics|depends?) [^.]{0,80}"
            r"batch ?norm\w* (?:and|or|,|as well as|plus) (?:also )?(?:layer ?norm|rms ?norm)",
            r"batch ?norm\w* (?:and|or|,|as well as|plus) (?:also )?(?:layer ?norm|rms ?norm)\w* "
            r"[^.]{0,80}(?:breaks?|not exact|statistics of|statistics over|depends? on)",
        ), 0.35, "LayerNorm normalises each item over its own features, so accumulation stays "
                 "exact with it; only BatchNorm uses the batch's statistics"),
    ),
    topic=(r"gradients?", r"batch\w*", r"micro", r"loss", r"accumulat\w*", r"sum\w*", r"equal",
           r"norm\w*", r"zero_?grad"),
    course_text=(
        'Recap (04): k micro-batches, each loss divided by k, backward() after each (gradients add up in .grad), one optimizer.step() and zero_grad() per k. Pitfalls seen in the wild: transformers#24725 (loss normalisation with unequal token counts), pytorch#46516 (BatchNorm).',
        "runs the batch as k micro-batches, one forward and one backward each, lets backward() add the gradients up in p.grad, and steps the optimizer once. Done right, the gradient is the full batch's gradient, up to float rounding, while the activations in memory are those of one micro-batch.",
        "Dividing each micro-batch's loss by k is exact only when all micro-batches hold the same number of items (or tokens).",
    ),
    model_answer=(
        "The full-batch loss is a mean over samples, and the gradient of a sum is the sum of "
        "the gradients. Each backward adds into .grad instead of overwriting it, so if every "
        "micro-batch loss is divided by k and zero_grad and step are called only after the "
        "k-th micro-batch, .grad holds the full-batch gradient. It differs when micro-batches "
        "have different sizes or token counts (weight each by its count, not 1/k) and with "
        "BatchNorm, whose statistics are computed per micro-batch; dropout and float "
        "rounding also make it not bit-identical."),
    explanation=(
        "Linearity of differentiation makes accumulation exact for losses that are plain "
        "sums over independent samples; anything that couples samples within a batch "
        "(BatchNorm, in-batch negatives) or weights them unequally breaks it "
        "(transformers#24725, pytorch#46516)."),
)

# ----------------------------------------------------------------------------- (e)
_SAVE = r"(?:sav|stor|keep|kept|cach|hold|held|stash|retain|remember)\w*"
_LAYERS = r"(?:layers?|depth|blocks?)"
_MS = (r"(?:parameters?|params|weights|model states?|gradients?|grads|"
       r"(?:adam\w* |optimi[sz]er )?(?:states?|moments))")


def _listed(term: str) -> str:
    """``term``, or a list of them in one clause: "weights, gradients and the moments"."""
    return rf"{term}(?: (?:,|and|, and|or) (?:the |their |its |all )?{term})*"


_MS_LIST = _listed(_MS)
ACTIVATIONS_SCALING = Rubric(
    id="activations_scaling",
    question=("Why do activations, rather than parameters, usually decide whether a training "
              "batch fits in memory, and how does their memory scale with batch size and depth?"),
    concepts=(
        Concept("activations are saved in the forward pass for the backward pass", (
            rf"{_SAVE} {G(5)}(?:for|until|in|during|by|so) {G(3)}{_BWD}",
            rf"{_SAVE} {G(5)}(?:for|until|so that|so) {G(4)}(?:gradients?|grads)",
            rf"{_BWD} {G(4)}(?:needs?|requires?|uses?|reads?|consumes?) {G(4)}(?:them|activations?|"
            r"outputs?|inputs?|intermediate\w*|tensors?|results)",
            rf"(?:needed|required|used) (?:for|by|in|during) {G(2)}(?:{_BWD}|gradient\w*)",
            rf"inputs? (?:to|for|of) {G(2)}(?:gradient computation|gradient calculation|gradients?|"
            rf"{_BWD})",
            r"(?:autograd|the graph) (?:keeps|stores|saves|stashes|holds)",
            rf"(?:saved|stored|kept|cached) (?:for|until) {G(2)}{_BWD}",
        ), 1.0, "say what activations are: outputs saved in the forward pass because backward "
                "needs them"),
        Concept("activation memory grows linearly with batch size", (
            rf"(?:linear\w*|proportional\w*|scales?|scaling|grows?|growing|increases?|rises?) "
            rf"{G(3)}(?:with|in|to) {G(2)}(?:the )?{_BATCH}",
            rf"{_BATCH} {G(6)}(?:doubles?|linear\w*|proportional\w*|twice|2x)",
            rf"(?:bigger|larger|more|grow\w*|increas\w*) {G(2)}(?:with|as) {G(2)}(?:more )?{_BATCH}",
            r"(?:proportional|linear\w*|scales?|grows?|increases?) (?:to|with|in) (?:the )?(?:how many|"
            r"number of|count of) (?:examples|samples|inputs|sequences|items|images|tokens)",
            rf"more {_BATCH} {G(2)}(?:means?|gives?|needs?|uses?) {G(1)}more",
            rf"(?:double|doubling|doubles) {G(2)}{_BATCH}",
            r"(?:per|each|every|for every|for each) (?:sample|example|input|sequence|item|image)",
            r"(?:b|batch|batch size) ?(?:\*|x|×|times) ?(?:the )?(?:s|t|seq\w*|sequence|l|h|"
            r"layers|hidden)",
        ), 1.0, "say how it scales with the batch: linearly (one set of activations per sample)"),
        Concept("activation memory grows linearly with depth (number of layers)", (
            rf"(?:linear\w*|proportional\w*|scales?|scaling|grows?|growing|increases?|rises?) "
            rf"{G(3)}(?:with|in) {G(3)}(?:number of )?(?:layers|depth)",
            rf"(?:layers|depth) {G(6)}(?:doubles?|linear\w*|proportional\w*|twice|2x|each adds?)",
            rf"(?:double|doubling|doubles) {G(2)}(?:the )?(?:number of )?(?:layers|depth)",
            rf"(?:each|every|per) {_LAYERS}",
            rf"deeper {G(3)}(?:models?|networks?|nets?)",
            rf"(?:grow|grows|growing|increas\w*|scal\w*|linear\w*|proportional\w*) {G(6)}(?:and|,) "
            r"(?:also )?(?:with|in|to) (?:the )?(?:number of |count of |how many )?(?:layers|depth)",
            r"(?:x|\*|×|times) ?(?:the )?(?:l|layers|n_layers|depth|number of layers)\b",
        ), 1.0, "say how it scales with depth: linearly, every layer saves its own activations"),
        Concept("parameters, gradients and optimizer state do not depend on the batch", (
            rf"{_MS_LIST} {G(3, ['and'])}(?:are|is|stay|stays|remain|remains) {G(2)}(?:independent "
            r"of|fixed|constant|the same|unchanged|not affected|a fixed|set by)",
            rf"{_MS_LIST} {G(3, ['and'])}(?:do|does|will|can) not (?:depend|change|grow|scale|"
            r"increase|care)",
            rf"(?:independent of|regardless of|no matter) {G(3)}{_BATCH}",
            r"fixed (?:cost|size|amount|overhead|part)",
            rf"{_BATCH} {G(4)}(?:does not|do not|can not|will not) (?:change|affect|touch|alter) "
            rf"{G(3)}(?:them|parameters?|weights|model|gradients?|optimi[sz]er)",
        ), 1.0, "say why parameters do not decide it: weights, gradients and optimizer state are "
                "a fixed cost, independent of the batch"),
        Concept("so activations usually dominate / push a step over the limit", (
            r"dominat\w*|largest|biggest|the bulk|most of (?:the )?memory",
            rf"(?:far |much )?(?:larger|bigger|more) than {G(2)}(?:the )?(?:parameters?|weights|"
            r"model)",
            rf"(?:blow|blows|blowing) up|(?:cause|causes|trigger\w*) {G(2)}(?:the )?(?:oom|out of memory)",
            r"(?:decide|decides|determine|determines) whether",
            r"variable (?:part|cost)",
        ), 0.5, "conclude: activations usually dominate, so the batch decides whether it fits"),
        Concept("attention adds a term quadratic in sequence length", (
            rf"quadratic\w* (?:in|with) {G(3)}(?:sequence|seq\w*|context|tokens?|length)",
            rf"(?:sequence|seq\w*|context) {G(3)}(?:squared|quadratic\w*)",
            r"s ?\^ ?2|s2|s squared|s\*\*2|square of (?:the )?(?:sequence|seq\w*|context)",
            r"attention (?:matrix|matrices|scores|map|maps|probabilities|weights)",
        ), 0.5, "for transformers: the attention scores add a term that grows with the square "
                "of the sequence length"),
    ),
    misconceptions=(
        Misconception("says parameters, gradients or optimizer state grow with the batch", (
            r"(?<!for )(?:parameters?|weights|gradients?|grads|optimi[sz]er states?|adam states?) "
            rf"(?:, )?{G(3)}(?:grow|grows|scale|scales|increase|increases|double|doubles) "
            rf"{G(3)}(?:with|when|as) {G(3)}{_BATCH}",
            rf"(?:doubl|increas|rais)\w* {G(2)}{_BATCH} {G(3)}(?:doubles|increases) {G(2)}"
            r"(?:the )?(?:parameters?|weights|gradients?|grads|optimi[sz]er)",
        ), 0.35, "weights, gradients and optimizer state have one value per parameter, whatever "
                 "the batch; only activations grow with it"),
        Misconception("says activations are not kept for backward, or leave the GPU", (
            r"disk|disks|ssd|hard drive|(?:cpu|host) (?:ram|memory)|offload\w*",
            rf"(?:only|just) {G(1)}(?:needed|used|required) (?:in|for|during) {G(1)}forward",
            rf"(?:freed|released|discarded|deleted|dropped) {G(3)}(?:right |immediately |straight )?"
            r"after (?:each|every|the) (?:layer|forward|operation|op)",
        ), 0.5, "autograd keeps each layer's activations from the forward pass until backward has "
                "used them", fatal=True),
        Misconception("says activations do not depend on the batch", (
            rf"activations? {G(3)}(?:is|are|stays?|remains?) (?:constant|fixed|the same) (?:in|with|"
            r"across|for|regardless|whatever|no matter)",
            rf"(?:activation|activations) memory {G(2)}(?:is|stays|remains) (?:constant|fixed)",
            rf"activations? {G(4)}(?:independent of|(?:do|does) not depend on|not affected by) "
            rf"{G(2)}{_BATCH}",
            rf"activations? {G(3)}(?:are|is) (?:a )?(?:fixed|constant) (?:size|amount|cost)",
            rf"activations? {G(4)}same size as {G(2)}(?:the )?(?:parameters?|weights)",
        ), 0.35, "activations are stored per sample: they grow linearly with the batch", fatal=True),
        Misconception("says activations grow quadratically with the batch", (
            rf"quadratic\w* {G(3)}(?:in|with) {G(2)}{_BATCH}",
            rf"{_BATCH} {G(1)}(?:squared|quadratic\w*)(?! (?:with|in) (?:the )?(?:sequence|seq\w*|"
            r"context|length|tokens))",
        ), 0.3, "activations grow linearly with the batch; the quadratic term is in the "
                "sequence length (attention)"),
    ),
    topic=(r"activations?", r"batch\w*", r"layers?|depth", r"parameters?|weights", r"memory",
           r"forward|backward", r"linear\w*|scal\w*", r"gradients?"),
    course_text=(
        'Recap (01, 02): per transformer layer with 16-bit activations, eager attention and dropout, Korthikanti et al. 2022 count sbh(34 + 5as/h) bytes: s = sequence length, b = micro-batch, h = hidden size, a = attention heads. Fused attention kernels drop the 5as²b term.',
        'Recap (00, 01): training memory has four consumers: parameters, gradients, optimizer state and activations. An element takes 4 bytes in fp32 and 2 in fp16/bf16. Adam keeps two running moments per parameter (exp_avg, exp_avg_sq).',
    ),
    model_answer=(
        "Backward needs the activations, so every layer's outputs are saved in the forward pass "
        "for the backward pass. That memory is per sample: it grows linearly with batch size "
        "(and sequence length), and linearly with depth because each layer saves its own; "
        "attention adds a term quadratic in sequence length. Parameters, gradients and "
        "optimizer state are independent of the batch, a fixed cost set by the model size. So "
        "for a given model the activations usually dominate, and the batch decides whether a "
        "step fits."),
    explanation=(
        "Per transformer layer, Korthikanti et al. (2022) count sbh(34 + 5as/h) bytes of "
        "16-bit activations: linear in the micro-batch b, times L layers, with the 5as^2b "
        "attention term quadratic in s. Model states cost a fixed number of bytes per "
        "parameter (16 for mixed-precision Adam), whatever the batch."),
)

# ----------------------------------------------------------------------------- (f)
_ALLOC = r"(?:[a-z_.]*memory_allocated|allocated)"
ALLOCATED_VS_RESERVED = Rubric(
    id="allocated_vs_reserved",
    question=("Why can nvidia-smi show much more GPU memory in use than "
              "torch.cuda.memory_allocated(), and why is that usually not a leak?"),
    concepts=(
        Concept("memory_allocated counts only live tensors", (
            rf"{_ALLOC} {G(6)}(?:live|existing|current|alive|active|in use|occupied)",
            r"(?:live|existing|alive|active|current) tensors?",
            rf"tensors? {G(3)}(?:that are |which are )?(?:alive|live|in use|still referenced|"
            r"currently used|that exist)",
            rf"tensors? {G(4)}(?:still|currently|actually) (?:exist\w*|alive|live|referenced|"
            r"reference\w*|in use|used|held|hold)",
            rf"{_ALLOC} {G(3)}(?:= ?|is |means |counts |only counts )?{G(1)}tensors?",
            rf"{_ALLOC} {G(4)}(?:actually|really) (?:used|uses|in use|holds?)",
        ), 1.0, "say what memory_allocated counts: the bytes of tensors that are alive now"),
        Concept("the caching allocator keeps freed blocks for reuse", (
            r"cach\w* allocator|allocator cache|caching",
            rf"(?:go|goes|went|returned|given|handed|back) {G(3)}(?:cache|pool)",
            rf"(?:not|never|instead of|rather than) {G(2)}(?:returned |given back |handed back |back )?"
            r"(?:to|into) (?:the )?(?:driver|gpu|os|cuda)",
            r"(?<!kv )(?<!key value )(?<!kv cache )(?:the|a|its|pytorch) cache(?! (?:by|of keys|"
            r"of k|holds? (?:the )?keys?|keeps? (?:the )?keys?|grows|of past))",
            rf"(?:keep|keeps|kept|hold|holds|held|retain\w*|cach\w*) {G(4)}(?:freed|free|unused|"
            rf"released|deleted|empty) {G(2)}(?:blocks?|memory|segments?|chunks?|space)",
            rf"(?:freed|free|unused|released) (?:blocks?|memory|segments?) {G(4)}(?:kept|held|cached|"
            r"stays?|remains?|reserved)",
            rf"(?:keep|keeps|kept|hold|holds|held|retain\w*) {G(3)}(?:after|even after|when|once) "
            rf"{G(3)}(?:freed|deleted|released|gone|go out of scope|are freed|is freed|die)",
            rf"(?:not|never) {G(3)}(?:return\w*|giv\w* back|gives? back|releas\w*|hand\w* back) "
            rf"{G(4)}(?:driver|gpu|os|cuda|device|system)",
            r"(?:memory )?pool",
            rf"(?:includes?|contains?|holds?|keeps?) {G(2)}(?:cached|freed|unused) (?:blocks?|memory|"
            r"segments?|tensors?)",
            rf"reserves? more than {G(2)}(?:it )?(?:allocates|uses|needs)",
        ), 1.0, "name the mechanism: PyTorch's caching allocator keeps freed blocks instead of "
                "returning them to the driver"),
        Concept("memory_reserved: what the allocator holds, at least the allocated bytes", (
            r"[a-z_.]*memory_reserved|reserved",
            rf"(?:rounds?|rounded|rounding) {G(3)}(?:up|blocks?|512|2 ?mib|sizes?)",
        ), 0.75, "name the other counter: memory_reserved, the allocator's pool (>= allocated)"),
        Concept("nvidia-smi also counts the CUDA context and other processes", (
            r"(?:cuda )?contexts?",
            r"other (?:processes|programs|applications|jobs|users)",
            rf"(?:driver|runtime|cudnn|cublas|kernels?|libraries) {G(3)}(?:overhead|memory|"
            r"workspaces?|code|images?)",
            r"(?:per ?)?process (?:overhead|memory)",
        ), 1.0, "say what else nvidia-smi counts: the CUDA context (hundreds of MB) and other "
                "processes"),
        Concept("not a leak: cached memory is reused; a leak shows as allocated growing", (
            rf"{_ALLOC} {G(5)}(?:grow|grows|growing|keeps? (?:growing|rising|increasing|climbing)|"
            r"increases|increasing|climbs|climbing|rises|rising)",
            r"(?:grow|grows|growing|increase|increases|increasing|climb\w*|ris\w*) "
            rf"{G(3)}(?:every|each|per|from|across|over) {G(2)}(?:step|iteration|epoch|batch)\w*",
            r"(?:stable|flat|constant|steady|plateau\w*|stays the same)",
            rf"(?:reus|re us|recycl)\w* {G(5)}(?:next|later|future|subsequent|following|new)",
            rf"(?:next|later|future|subsequent|following|new) {G(2)}(?:allocations?|iterations?|"
            r"steps?|tensors?|requests?)",
        ), 1.0, "say how to tell it is not a leak: the cache is reused by later allocations; a "
                "leak makes memory_allocated grow step after step"),
        Concept("tools: empty_cache, peak and snapshot counters", (
            r"empty_cache",
            r"max_memory_(?:allocated|reserved)|memory_(?:summary|snapshot|stats)",
            r"_record_memory_history|snapshots?",
        ), 0.5, "empty_cache() returns cached blocks to the driver (rarely needed); memory "
                "snapshots show what holds memory"),
    ),
    misconceptions=(
        Misconception("explains the gap by GB vs GiB units", (
            rf"(?:reports?|shows?|counts?|uses?|in) (?:gib|gb|mib|mb) {G(3)}(?:while|whereas|but|and) "
            rf"{G(3)}(?:reports?|shows?|counts?|uses?|in) (?:gib|gb|mib|mb)",
            rf"(?:units?|gib vs gb|gb vs gib|gib and gb|gb and gib) {G(3)}(?:is|are|explain\w*) "
            rf"{G(2)}(?:the )?(?:whole )?(?:difference|gap)",
        ), 0.4, "units explain a few percent at most; the gap is the allocator's cache and the CUDA "
                "context", fatal=True),
        Misconception("calls the gap a memory leak", (
            rf"(?:allocator|pytorch|cache|caching|memory|tensors?|it|context) {G(2)}leak(?:s|ing|ed)?\b",
            rf"(?:is|it is|this is|that is|must be|indicates?|means?|sign of|due to|caused by|"
            rf"because of) {G(2)}(?:a )?(?:memory )?leak\w*",
            rf"(?:tensors?|memory) {G(3)}(?:are|is) never (?:freed|released)",
        ), 0.35, "a large, stable reserved pool is the allocator's cache, not a leak", fatal=True),
        Misconception("swaps the counters: allocated as the pool, nvidia-smi as live tensors", (
            rf"nvidia smi {G(2)}(?:counts|shows|reports|measures|sees) {G(2)}(?:only )?(?:the )?(?:live|"
            r"alive|active|existing) tensors",
            rf"{_ALLOC} {G(2)}(?:counts|includes|shows|reports|measures) {G(2)}(?:the )?(?:reserved|"
            r"cache|cached|pool|whole|total)",
        ), 0.4, "it is the other way round: memory_allocated counts live tensors, nvidia-smi "
                "everything the process took from the driver", fatal=True),
        Misconception("says empty_cache frees tensors or lowers memory_allocated", (
            rf"empty_cache {G(5)}(?:frees?|releases?|deletes?|clears?|reduces?|lowers?|removes?) "
            rf"{G(3)}(?:tensors?|{_ALLOC}|live)",
            rf"empty_cache {G(5)}(?:every|each|after each|after every) (?:step|iteration|batch|epoch)",
        ), 0.3, "empty_cache() only hands cached, unused blocks back; live tensors stay and "
                "memory_allocated does not change (calling it every step just slows training)"),
    ),
    topic=(r"memory", r"allocat\w*", r"reserved", r"nvidia smi", r"cach\w*", r"tensors?",
           r"gpu", r"leak\w*", r"driver|context"),
    full_credit_at=0.75,
    course_text=(
        "Recap (00, 05): torch.cuda.memory_allocated() counts live tensors, torch.cuda.memory_reserved() what PyTorch's caching allocator holds from the driver, and nvidia-smi what the process holds. The allocator rounds every request up to a multiple of 512 bytes (c10/cuda/CUDACachingAllocator.cpp).",
    ),
    model_answer=(
        "memory_allocated() counts only the bytes of live tensors. PyTorch's caching allocator "
        "does not return freed blocks to the driver: it keeps them reserved for reuse, so "
        "memory_reserved() is at least the allocated amount, and nvidia-smi shows the reserved "
        "pool plus the CUDA context (hundreds of MB) and other processes. It is not a leak as "
        "long as memory_allocated stays flat from step to step: the cached blocks are reused "
        "by later allocations. empty_cache() hands them back but is rarely needed."),
    explanation=(
        "The caching allocator (c10/cuda/CUDACachingAllocator.cpp) rounds requests up (512 "
        "bytes, 2 MiB and 20 MiB blocks) and keeps freed blocks to avoid slow cudaMalloc/"
        "cudaFree calls. nvidia-smi sees only what the process took from the driver "
        "(pytorch#40989, #37250)."),
)

# ----------------------------------------------------------------------------- (g)
_GPUS = r"(?:gpus?|devices?|ranks?|workers?|cards?|accelerators?)"
_STATES = (r"(?:optimi[sz]er states?|optimi[sz]er|adam (?:states?|moments)|moments|gradients?|"
           r"grads|parameters?|params|weights|model states?|states?)")
SHARDING_WHEN_WHY = Rubric(
    id="sharding_when_why",
    question=("When and why would you shard training state across GPUs (ZeRO/FSDP) or split "
              "the model itself (tensor or pipeline parallelism), instead of only using "
              "single-GPU tricks?"),
    concepts=(
        Concept("when the model states do not fit on one GPU", (
            rf"(?:not|never|no longer) {G(2)}fit {G(4)}(?:one|a single|single|each|a|the) "
            rf"{G(1)}{_GPUS}",
            rf"too (?:big|large) {G(4)}(?:one|a single|single|each|a) {G(1)}{_GPUS}",
            rf"(?:bigger|larger|more) than {G(4)}(?:one|a single|single|each|a) {G(1)}{_GPUS}",
            rf"(?:can not|could not|unable to|can never) {G(2)}(?:hold|store|fit|keep) "
            rf"{G(3)}(?:model|states?|parameters?|weights|it|them)",
            rf"exceed\w* {G(4)}(?:memory|capacity) {G(4)}(?:one|single|a|each) {G(1)}{_GPUS}",
            r"(?:does not|do not|would not|will not|can not) fit",
        ), 1.0, "say when: the parameters, gradients and optimizer state do not fit on one GPU"),
        Concept("single-GPU tricks mostly cut activations, not model states", (
            rf"(?:tricks?|techniques?|they|these|those) {G(3)}(?:only |mainly |mostly )?(?:cut|cuts|"
            rf"reduce|reduces|shrink|shrinks|target|targets|lower|lowers|save|saves|attack) "
            rf"{G(2)}activations?",
            rf"(?:checkpointing|mixed precision|accumulation|tricks?|techniques?) {G(6)}"
            rf"(?:only|mainly|mostly|mainly target|target) {G(3)}activations?",
            rf"(?:not|never|hardly|barely) {G(3)}(?:reduce|shrink|cut|help with|touch|change|"
            rf"affect|lower) {G(4)}(?:optimi[sz]er states?|parameters|weights|model states?|"
            r"gradients|adam)",
            rf"(?:model states?|optimi[sz]er states?|parameters and gradients|weights) {G(5)}"
            r"(?:stay|stays|remain|remains|unchanged|untouched|still there)",
            r"(?:16|18|12) bytes per param\w*",
        ), 0.75, "say why the single-GPU tricks are not enough: they cut activations, while "
                 "parameters, gradients and optimizer state (16 bytes/param) stay"),
        Concept("data parallelism replicates the whole model state on every GPU", (
            r"replica\w*|replicat\w*|redundan\w*|duplicat\w*",
            r"(?:full|whole|complete|entire|same) (?:copy|copies|model)",
            rf"(?:every|each) {_GPUS} {G(3)}(?:holds?|keeps?|stores?|has|needs?|gets?) {G(3)}"
            r"(?:full|whole|complete|entire|same|copy|all)",
            rf"(?:data parallel\w*|ddp) {G(5)}(?:does not|do not|never|can not) "
            rf"{G(2)}(?:reduce|lower|cut|help|save|shrink)",
            rf"(?:cop(?:y|ies|ied)|mirror\w*|clon\w*) {G(4)}(?:onto|on|to|in) (?:every|each|all) "
            rf"{G(1)}{_GPUS}",
            rf"(?:adding|more) {_GPUS} {G(3)}(?:does not|do not|will not|can not) (?:reduce|lower|"
            r"help|cut|save|shrink)",
        ), 1.0, "say why plain data parallelism does not help: every GPU holds a full replica"),
        Concept("ZeRO/FSDP partition optimizer state, gradients and parameters (about 1/N each)", (
            rf"(?:shard|partition|split|splits|splitting|divid|spread|distribut|slic)\w* "
            rf"{G(4)}{_STATES}",
            rf"{_STATES} {G(4)}(?:are|is|get|gets) {G(2)}(?:sharded|partitioned|split|divided|"
            r"spread|distributed|sliced)",
            r"1 ?/ ?n\w*|divided by (?:the )?(?:number of )?(?:gpus|devices|n|ranks)",
            rf"(?:each|every) {_GPUS} {G(3)}(?:only )?(?:holds?|keeps?|stores?|owns?|has) {G(2)}"
            r"(?:a )?(?:slice|shard|part|fraction|piece|portion|1/n)",
            r"zero ?(?:1|2|3|stage \d)|stage (?:1|2|3)",
        ), 1.0, "say how sharding helps: the optimizer state, gradients and parameters are "
                "partitioned, each GPU keeps about 1/N"),
        Concept("the cost: communication (all-gather / reduce-scatter), bubbles, complexity", (
            r"communicat\w*|all ?gather\w*|reduce ?scatter\w*|all ?reduce\w*",
            r"(?:over|through|across|on) (?:the )?(?:network|interconnect|nvlink|infiniband)",
            r"(?:bandwidth|network|interconnect) (?:cost|costs|traffic|bound|limited|overhead|time)",
            rf"(?:cost|costs|pay|pays|uses|needs|eats|consumes) {G(2)}(?:bandwidth|network|interconnect)",
            rf"(?:weights|parameters|gradients|shards) {G(4)}(?:gathered|fetched|sent|exchanged|"
            r"transferred|broadcast)",
            rf"(?:gather|fetch|collect|send|exchang|transfer)\w* {G(3)}(?:parameters?|weights|"
            r"gradients?|shards?|activations?)",
            r"bubbles?|idle (?:time|stages?|gpus?)",
        ), 1.0, "say what it costs: extra communication (all-gather of weights, reduce-scatter "
                "of gradients)"),
        Concept("tensor/pipeline parallelism when a single layer or its activations do not fit", (
            r"(?:single|one|individual) (?:layer|matmul|matrix multiplication|weight matri\w*|"
            r"operator)",
            rf"(?:layers?|matmuls?|weight matri\w*) {G(3)}(?:too (?:big|large)|(?:does|do|can) not "
            r"fit)",
            rf"(?:split|splits|splitting|partition\w*|divid\w*|cut\w*|shard\w*) {G(3)}"
            rf"(?:layers?|matmuls?|weight matri\w*|tensors?|operations?|ops) {G(3)}"
            r"(?:across|over|between|onto|among|into)",
            rf"(?:different|separate|consecutive) (?:layers|stages) {G(3)}(?:on|onto|to|across) "
            rf"{G(2)}(?:different|separate|several)",
            r"pipeline stages?|(?:stages?|groups) of layers",
        ), 0.75, "say when model parallelism is needed: when even one layer (or its activations) "
                 "does not fit, split layers or matmuls across GPUs"),
    ),
    misconceptions=(
        Misconception("says plain data parallelism lowers memory per GPU", (
            rf"(?:data parallel\w*|ddp) {G(6)}(?:reduc|lower|cut|divid|split|shrink|sav|"
            rf"decreas)\w* {G(4)}(?:memory|model states?|parameters|per {_GPUS}|by n)",
            rf"(?:data parallel\w*|ddp) {G(6)}(?:\d+|n|eight|two|four) times less memory",
            rf"(?:each|every) {_GPUS} {G(2)}(?:needs?|uses?) {G(1)}(?:\d+|n|eight|two|four) "
            r"times less memory",
        ), 0.35, "data parallelism copies the whole model state onto every GPU; only sharding "
                 "divides it"),
        Misconception("says ZeRO-3 costs no more communication than DDP, or ZeRO-1 the most", (
            rf"(?:zero 3|zero stage 3|stage 3|fsdp) {G(4)}no (?:more|extra|additional) (?:traffic|"
            r"communication|bandwidth|volume) than",
            rf"(?:zero 3|zero stage 3|stage 3|fsdp) {G(4)}(?:the )?same (?:traffic|communication|"
            rf"volume|bandwidth) (?:as|than) {G(2)}(?:ddp|data parallel\w*|all ?reduce)",
            rf"(?:communication|traffic|bandwidth) {G(3)}(?:highest|largest|biggest|the most|worst|"
            rf"greatest) {G(2)}(?:for|with|in|at) (?:zero 1|zero stage 1|stage 1)\b",
            rf"(?:zero 1|zero stage 1|stage 1) {G(4)}(?:the )?(?:most|highest|largest) "
            r"(?:traffic|communication|bandwidth)",
        ), 0.3, "ZeRO-1 and ZeRO-2 move about what DDP's all-reduce moves (2x the parameters per "
                "step); ZeRO-3/FSDP gathers the weights again in backward, about 1.5x DDP "
                "(Rajbhandari et al. 2020)"),
        Misconception("says sharding is free (no extra communication)", (
            rf"(?:shard\w*|zero|fsdp|it) {G(4)}(?:is|are|comes) {G(2)}free\b(?! (?:up|memory))",
            r"(?:no|without|zero) (?:extra |additional |any )?(?:communication|overhead|cost)",
        ), 0.3, "sharding trades memory for communication: weights are gathered and gradients "
                "scattered every step"),
    ),
    topic=(r"gpus?", r"shard\w*", r"parallel\w*", r"memory", r"parameters?|weights",
           r"optimi[sz]er", r"gradients?", r"zero|fsdp", r"model"),
    course_text=(
        'Recap (06): with mixed-precision Adam, P parameters, N_d data-parallel GPUs and K = 12 bytes of optimizer state per parameter, ZeRO keeps per GPU: stage 1 4P + KP/N_d, stage 2 2P + (2+K)P/N_d, stage 3 (4+K)P/N_d bytes (Rajbhandari et al. 2020).',
    ),
    model_answer=(
        "Single-GPU tricks such as mixed precision, checkpointing and accumulation mostly cut "
        "activations, while parameters, gradients and optimizer state stay: 16 bytes per "
        "parameter with mixed-precision Adam. When those model states do not fit on one GPU, plain data "
        "parallelism does not help, because every GPU holds a full replica. ZeRO/FSDP shard "
        "the optimizer state, gradients and parameters across the N data-parallel GPUs, so "
        "each keeps about 1/N, at the cost of extra communication (all-gather of weights, "
        "reduce-scatter of gradients). Tensor or pipeline parallelism split the layers "
        "themselves across GPUs: needed when even a single layer or its activations do not "
        "fit, at the cost of communication and pipeline bubbles."),
    explanation=(
        "ZeRO (Rajbhandari et al. 2020) per GPU with N_d GPUs and K = 12: stage 1 "
        "4P + KP/N_d, stage 2 2P + (2+K)P/N_d, stage 3 (4+K)P/N_d bytes; for 7.5B "
        "parameters on 64 GPUs 31.4 / 16.6 / 1.9 GB instead of 120 GB. Stage 3 moves about 3x "
        "the parameter bytes per step, 1.5x DDP's traffic (the same paper). Tensor and pipeline "
        "parallelism (Megatron-LM) also split the compute and the activations."),
)

# ----------------------------------------------------------------------------- (h)
_KV = r"(?:keys? and (?:the )?values?|keys? ?(?:/|&) ?values?|k and v|kv|key ?value|k ?/ ?v)"
_KVH = r"(?:kv|k ?/ ?v|key ?/ ?value|key ?value|key and value|k and v)"
_PAST = (r"(?:past|previous|earlier|prior|old|older|already|seen|generated|preceding|prefix|"
         r"prompt|context|processed)")
_SEQ = r"(?:sequence\w*|context\w*|lengths?|tokens?|seq|batch\w*|conversations?|requests?)"
_CACHE = r"(?:kv cache|cache|it)"
KV_CACHE_TRADEOFF = Rubric(
    id="kv_cache_tradeoff",
    question=("Why does a KV cache make text generation faster, what does it cost in memory, and "
              "how does grouped-query attention reduce that cost?"),
    concepts=(
        Concept("the cache keeps every layer's keys and values of the tokens seen so far", (
            rf"(?:stor|keep|cach|sav|hold|retain|remember|memori[sz]|stash)\w* {G(5)}{_KV}",
            rf"{_KV} {G(3)}(?:are|is|get|gets|were|being) {G(2)}(?:stored|kept|cached|saved|held|"
            r"retained|remembered|reused)",
            rf"{_KV} (?:vectors |tensors |projections |pairs )?(?:of|for|from) {G(4)}{_PAST}",
            rf"{_PAST} (?:tokens?|positions?) {G(2)}{_KV}",
            rf"reus\w* {G(4)}{_KV}",
        ), 1.0, "say what is cached: each layer's keys and values of every token seen so far"),
        Concept("each step computes only the new token instead of recomputing the prefix", (
            rf"(?:without|no need to|instead of|avoid\w*|skip\w*|never|not|no|no longer|saves?|"
            rf"spar\w*|rather than) {G(3)}re ?(?:comput|calculat|process|run|do|doing|deriv)\w*",
            rf"(?:only|just) {G(3)}(?:the |one |a |each )?(?:new|newest|latest|last|current|next|"
            r"single|one) (?:token|position|query)",
            rf"(?:new|newest|latest|last|current|next|single) (?:token|position) {G(3)}(?:only|"
            r"alone|by itself)",
            r"(?:one|single|a) token (?:at a time|per step|each step|in each step)",
            rf"(?:quadratic\w*|o ?n2|t2|n\^2|t\^2) {G(6)}(?:linear\w*|o ?t\b|o ?n\b|constant)",
            rf"(?:compute|computes|computing|work|cost|costs|flops) {G(3)}(?:per|each|every) "
            rf"(?:new )?(?:token|step) {G(3)}(?:drops?|falls?|shrinks?|constant|linear|less|"
            r"smaller|lower)",
            r"(?:whole|entire|full) (?:sequence|prefix|prompt|context|history) (?:again|every|each|"
            r"over and over|from scratch)",
            rf"re ?(?:comput|process|run)\w* {G(3)}(?:whole|entire|full|all)",
        ), 1.0, "say why it is faster: each step computes only the new token's query, key and "
                "value instead of recomputing the whole prefix"),
        Concept("its memory grows linearly with every token and every sequence", (
            rf"(?:grows?|growing|grew|scal\w*|increas\w*|proportional|linear\w*|rises?|rising|"
            rf"expands?) {G(4)}(?:with|in|to|by|per) {G(4)}{_SEQ}",
            rf"{G(1)}(?:every|each|per) (?:new |generated |extra |additional )?(?:token|position)"
            rf" {G(5)}(?:adds?|costs?|grows?|takes?|needs?|appends?|more|another|extra)",
            r"(?:bytes|memory|kib|kb|mb|mib) per token",
            r"2 x (?:l|layers|n_layers|the number of layers)",
            rf"(?:times|x) {G(2)}(?:seq|sequence length|context length|tokens|batch)",
        ), 1.0, "say what it costs: memory that grows linearly with every token of every "
                "sequence (one key and one value per layer and per key/value head)"),
        Concept("at long contexts or large batches it outgrows the weights and limits the batch", (
            rf"(?:exceed\w*|more than|larger than|bigger than|outgrow\w*|dwarf\w*|rival\w*|"
            rf"overtak\w*|surpass\w*) {G(3)}(?:the )?(?:model )?(?:weights|parameters|model)",
            rf"(?:limit\w*|caps?|capped|bound\w*|determin\w*|decid\w*|constrain\w*|restrict\w*) "
            rf"{G(5)}(?:batch\w*|concurren\w*|how many|number of (?:sequences|requests|users|"
            r"conversations)|context length|throughput|capacity)",
            rf"(?:fewer|less|smaller) {G(2)}(?:sequences|requests|users|conversations|batch\w*) "
            rf"{G(3)}(?:fit|served|at once|in parallel|concurrently)",
            r"(?:dominat\w*|bottleneck\w*|binding) (?:the )?(?:memory|serving|inference)",
            rf"(?:memory|serving|inference) {G(3)}(?:dominated|bottleneck\w*|bound)",
            r"(?:runs?|running|ran) out of memory|out of memory|\boom\b",
        ), 0.75, "say why it matters: at long contexts or large batches the cache outgrows the "
                 "weights and limits how many sequences fit"),
        Concept("GQA: query heads share fewer key/value heads, the cache shrinks by heads/kv_heads", (
            rf"(?:shar\w*) {G(4)}(?:{_KV}|(?:{_KVH} )?heads?)",
            rf"(?:groups?|several|multiple|many) (?:of )?(?:query )?heads {G(4)}(?:use|share|"
            rf"reuse|attend|read)\w* {G(3)}(?:same|one|single|a)",
            rf"fewer {G(2)}{_KVH} heads",
            rf"{_KVH} heads {G(3)}(?:than|fewer|smaller|less|"
            r"instead of|rather than)",
            rf"(?:divid\w*|reduc\w*|shrink\w*|cut\w*|smaller|lower\w*) {G(6)}(?:by|factor of) "
            rf"{G(3)}(?:heads ?/ ?kv_heads|the (?:group|ratio)|number of (?:query )?heads|"
            r"\d+ ?x|\d+|eight|four|two)",
            rf"heads ?/ ?kv_heads|n_heads ?/ ?n_kv\w*|(?:query )?heads per {_KVH} head",
        ), 1.0, "say how GQA helps: groups of query heads share one key/value head, so the cache "
                "shrinks by heads / kv_heads"),
        Concept("other levers: multi-query, a quantized cache, paged allocation", (
            r"multi ?query|\bmqa\b",
            r"paged ?attention|vllm|(?:in |into |as )pages|paging",
            rf"(?:quanti[sz]\w*|8 ?bit|int8|fp8|4 ?bit) {G(3)}(?:cache|keys?|values?|kv)",
            rf"(?:cache|kv|keys? and values?) {G(3)}(?:in|to) (?:8 ?bit|int8|fp8|4 ?bit|"
            r"lower precision)",
            r"sliding window",
        ), 0.5, "multi-query attention (one key/value head), an 8-bit cache or paged allocation "
                "(vLLM) cut it further"),
    ),
    misconceptions=(
        Misconception("says the cache holds weights, gradients or activations for backward", (
            rf"{_CACHE} {G(3)}(?:stores?|keeps?|holds?|saves?|caches?) {G(3)}(?:the )?(?:model )?"
            r"(?:weights|gradients|parameters|optimi[sz]er state\w*)",
            rf"{_CACHE} {G(4)}(?:for|in) (?:the )?backward",
            rf"(?:stores?|keeps?|holds?|saves?|caches?) {G(3)}(?:the )?(?:queries|query vectors)",
        ), 0.4, "the cache holds the keys and values of past tokens, not weights or gradients, "
                "and serving has no backward", fatal=True),
        Misconception("says the cache saves memory", (
            rf"(?:kv )?cach(?:e|ing) {G(4)}(?:saves?|reduces?|lowers?|cuts?|frees?|shrinks?) "
            rf"{G(2)}(?:gpu )?memory",
            rf"(?:kv )?cach(?:e|ing) {G(3)}(?:uses?|needs?|takes?) (?:less|no (?:extra |additional )?)"
            r"memory",
        ), 0.4, "the cache trades memory for speed: it adds memory, it does not save it",
            fatal=True),
        Misconception("says the cache grows quadratically with the sequence length", (
            rf"{_CACHE} {G(5)}(?:quadratic\w*|square of|with s\^2|o ?s2)",
            rf"(?:cache|memory) {G(2)}(?:grows?|scales?|increases?) {G(3)}(?:quadratic\w*|"
            r"with the square)",
        ), 0.3, "the cache grows linearly in the sequence length (the s x s scores of eager "
                "attention are the quadratic term, and they are not cached)"),
        Misconception("says GQA shrinks the cache by dropping query heads", (
            rf"(?:fewer|less|reduc\w*|drop\w*|remov\w*) {G(2)}query heads",
        ), 0.3, "GQA keeps every query head; it shares the key/value heads"),
    ),
    topic=(r"cache\w*", r"kv", r"keys?", r"values?", r"tokens?", r"memory", r"attention",
           r"heads?", r"generat\w*|decod\w*", r"gqa|grouped"),
    full_credit_at=0.8,
    course_text=(
        "The cache is proportional to kv_heads, not to the number of query heads. Multi-query attention (Shazeer 2019) lets all query heads share one key/value head; grouped-query attention (Ainslie et al. 2023) shares each key/value head among a group of query heads (Llama-2-70B, Llama-3, Mistral: 8 kv heads for 32-64 query heads).",
        "Each step then costs O(t) instead of O(t²) for attention, and O(1) instead of O(t) for the projections and the MLP. The price is memory that grows with every token.",
    ),
    model_answer=(
        "Generating token t+1 needs the keys and values of all earlier tokens in every layer. "
        "The KV cache stores them, so each decode step computes only the new token's query, key "
        "and value instead of recomputing the whole prefix. The price is memory that grows "
        "linearly with every token of every sequence: one key and one value per layer and per "
        "key/value head. At long contexts or large batches it exceeds the weights and limits "
        "how many sequences fit. Grouped-query attention lets groups of query heads share one "
        "key/value head, so the cache shrinks by heads / kv_heads (8x for 64 heads and 8 kv "
        "heads); multi-query attention, an 8-bit cache or paged allocation (vLLM) cut it "
        "further."),
    explanation=(
        "Pope et al. 2022 (arXiv 2211.05102, sec. 2) size the cache as 2 x layers x kv_heads x "
        "head_dim x seq x batch x bytes: Llama-2-7B in fp16 keeps 512 KiB per token, 2 GiB for "
        "a 4096-token sequence. Ainslie et al. 2023 (GQA, arXiv 2305.13245) and Shazeer 2019 "
        "(multi-query) share key/value heads; Kwon et al. 2023 (vLLM) page the cache."),
)

# 01's two written answers (Written answer 1 and 2 of solutions/01_where_memory_goes).
_PM_ACT = (r"(?:(?:saved |stored |stashed |kept )?(?:activations?|intermediates?|"
           r"intermediate (?:values|results|tensors)|stash|saved tensors|"
           r"tensors? (?:saved|kept|stored) for (?:the )?backward|"
           r"everything autograd (?:kept|saved)))")
_PM_B = (r"(?:batch\w*|batch size|bs|(?:the )?number of (?:samples|sequences|examples)|samples|"
         r"sequences|examples)")
_PM_MS = (r"(?:parameters?|params|weights?|model states?|gradients?|grads|"
          r"(?:adam\w* |optimi[sz]er\w* |adamw )?(?:states?|moments))")
_PM_ONE = (r"(?:batch (?:of |size )?(?:1|one)(?![0-9])|(?:1|one|a single) (?:sample|sequence)|"
           r"bs ?(?:= ?)?1(?![0-9]))"
           r"(?: \.| ,)?")
_PM_B_PROP = r"(?:batch ?(?:proportional|dependent|sized)|proportional to (?:the )?batch\w*)"
# a list of consumers: the gap may cross commas (",", "+", "=", "plus"), never a negation
_PM_L = r"(?:(?!(?:not|no|never|without|nor|freed|released|gone) )[^ .]+ )"
PEAK_MOVES = Rubric(
    id="peak_moves",
    question=("Why is the peak of this training step right after the forward pass for a batch "
              "of 16, but in the optimizer step for a batch of 1, which consumers are live at each "
              "of the two moments, and which of them depend on the batch size?"),
    concepts=(
        Concept("activations scale with the batch size", (
            rf"{_PM_ACT} {G(4)}(?:scale|grow|increase|shrink|depend|proportional|linear)\w*",
            rf"{_PM_ACT} (?:, |\. )(?:(?:which|that|they|these) {G(2)})?"
            r"(?:scale|grow|increase|depend|proportional)\w*",
            rf"{_PM_B_PROP} (?:part |share |term )?(?:\. |, |= )?(?:the )?{_PM_ACT}",
            rf"{_PM_ACT} {G(6)}(?:\. |, )(?:they|which|these) {G(2)}(?:scale|grow|increase|"
            r"proportional)\w*",
            rf"(?:large|larger|big|bigger|small|smaller|tiny) batch\w* "
            rf"{G(6)}(?:more|less|fewer|larger|smaller|tiny|few) {_PM_ACT}",
            rf"{_PM_ACT} {G(6)}(?:per|each|every) (?:sample|sequence|example)",
            rf"(?:each|every) (?:sample|sequence|example) {G(3)}(?:keeps?|has|saves?|stores?|adds?)"
            rf" {G(2)}(?:own(?! {G(2)}(?:gradients?|grads|moments?|momentum|state|weights|copy))|"
            r"activations?)",
            rf"{_PM_B} ?dependent (?:\. |, )?(?:only )?(?:the )?{_PM_ACT}",
            rf"(?:depends?|scales?|grows?) (?:on|with) {G(2)}{_PM_B} (?:is|are) {G(2)}{_PM_ACT}",
            rf"batch (?:of |size )?16 {G(4)}{_PM_ACT} {G(3)}(?:dominat\w*|biggest|largest|huge)",
            r"(?:sized|set|determined) by the (?:data|batch|input)|(?:data|batch) sized"),
            weight=1.0, hint="activations scale with the batch size"),
        Concept("model states do not depend on the batch", (
            rf"{_PM_MS} {G(8)}(?:not|never) {G(2)}(?:depend|scale|change|grow)\w*",
            rf"(?:{_PM_MS}|these|those|which|the rest) {G(4)}(?:do(?:es)? not|never|will not) "
            rf"(?:depend|scale|change|grow)\w* {G(2)}(?:on|with) {G(2)}{_PM_B}",
            rf"none of (?:that|these|them|this|those) {G(2)}(?:depend|scale|change|grow)\w* "
            rf"{G(2)}(?:on|with) {G(2)}{_PM_B}",
            rf"(?:ignores?|unaffected by|insensitive to) {G(2)}{_PM_B}",
            rf"{_PM_MS} {G(6)}(?:independent|regardless) of {G(2)}{_PM_B}",
            rf"{_PM_MS} {G(6)}(?:fixed|constant|same size|unchanged)",
            rf"{_PM_MS} {G(4)}(?:the same|identical|unchanged|constant|fixed) (?:at|for|with|in|"
            rf"whatever|regardless of) (?:any |every |each |the |all )?{_PM_B}",
            rf"{_PM_MS} do(?:es)? not(?! {G(3)}(?:fit|matter|exist))",
            rf"{_PM_MS} (?:are|is) not(?: \.| ,|$)",
            rf"{_PM_B} ?independent {G(2)}(?:update|step|optimi[sz]er|{_PM_MS})",
            rf"{_PM_MS} {_PM_L}{{0,8}}(?:all |both |are |is )?{_PM_B} ?independent",
            rf"{_PM_MS} {_PM_L}{{0,8}}(?:all |both |are |is )?(?:independent|regardless) of "
            rf"{G(2)}{_PM_B}",
            rf"(?:none|neither) (?:of (?:them|these|those|which) )?(?:depending|depends?|scaling|"
            rf"scales?|grows?|growing) (?:on|with) {G(2)}{_PM_B}",
            rf"(?:fixed|constant|batch independent)(?: part| cost| share| term)? (?:\. |, |= )?"
            rf"(?:the )?{_PM_MS}",
            rf"(?:the rest|everything else|all else) {G(3)}(?:batch independent|fixed|constant|"
            rf"independent of {G(2)}{_PM_B})",
            r"(?:sized|set|determined|fixed) by the (?:model|parameters)|model sized"),
            weight=1.0, hint="parameters, gradients and optimizer state do not depend on the "
                             "batch size"),
        Concept("after forward: all saved activations are alive", (
            rf"(?:every|all|whole) {G(3)}{_PM_ACT} "
            rf"{G(6)}(?:alive|live|stored|kept|held|saved|present|exist|in memory)\w*",
            rf"(?:every|all) {G(2)}(?:tensors?|activations?) {G(2)}(?:autograd )?(?:saved|stored|"
            rf"stashed|kept) for {G(2)}{_BWD}",
            rf"(?:end|after|turn|finish\w*) {G(3)}forward {G(10)}{_PM_ACT}"
            rf"(?! {G(3)}(?:freed|released|gone|discarded|deleted|dropped))",
            rf"(?:after|end of) (?:the )?forward(?: pass)? (?:\. |, |= )?{_PM_L}{{0,12}}"
            rf"(?:all |every |saved |stored )(?:the )?(?:saved |stored )?"
            r"activations?",
            rf"{_PM_ACT} {G(10)}(?:end|after) {G(2)}(?:the )?forward",
            rf"(?:after|end of) (?:the )?forward(?: pass)? (?:\. |, |= )?{_PM_L}{{0,12}}"
            rf"(?:the )?(?:whole|entire|full) {G(1)}{_PM_ACT}",
            rf"before {G(4)}{_PM_ACT} {G(4)}(?:freed|released)",
            rf"(?:alive|live|stored|held|kept|present|exist\w*|in memory) {G(4)}(?:end|after|"
            rf"finish\w*) {G(3)}forward",
            r"(?:alive|live|resident|stored|held|kept|present|in memory) (?:when|as|once) "
            r"(?:the )?forward(?: pass)? (?:ends|finishes|is done|completes|is over)",
            rf"(?:largest|highest|peak\w*|maximum|biggest) {G(3)}forward (?:finishes|ends|is done|"
            r"completes)"),
            weight=1.0, hint="right at the end of the forward pass every saved activation is "
                             "still alive"),
        Concept("optimizer step: params, all gradients, state and temporaries", (
            r"temporary|temporaries|temporar\w*|scratch",
            r"(?:buffers?|tensors?|copies) of (?:the )?(?:update|optimi[sz]er step|adamw? step)",
            rf"(?:foreach|update) {G(2)}(?:buffers?|tensors?|copies|copy)",
            rf"(?:extra|additional|another|one more) {G(2)}copy of (?:the )?(?:weights|"
            r"parameters)",
            rf"(?:all|every|whole|full set of) {G(2)}(?:gradients?|grads) {G(12)}(?:state|moments?|"
            r"optimizer)",
            rf"(?:state|moments?) {G(12)}(?:all|every) {G(2)}(?:gradients?|grads)",
            rf"(?:optimi[sz]er step|update|step\w*) (?:\. |= |, )?{_PM_L}{{0,10}}"
            rf"(?:gradients?|grads) {_PM_L}{{0,8}}(?:moments?|state)",
            rf"(?:update|step) {G(6)}(?:extra|additional) {G(3)}(?:memory|buffers?|tensors?)"),
            weight=1.0, hint="the optimizer step holds the parameters, all the gradients, both "
                             "Adam moments and the temporaries of the update"),
        Concept("at batch 1 the activations are small, so the optimizer step is the highest", (
            rf"{_PM_ONE} {_PM_L}{{0,8}}(?:{_PM_ACT}|they|them|it) {G(3)}(?:small|smaller|tiny|"
            r"tinier|few|negligible|little|shrinks?)",
            rf"{_PM_ONE} {_PM_L}{{0,6}}(?:small|tiny|negligible) {_PM_ACT}",
            rf"{_PM_ONE} (?:shrinks?|cuts?|reduces?) {G(3)}{_PM_ACT}",
            rf"{_PM_ONE} {_PM_L}{{0,10}}(?:higher|highest|larger|largest|taller|tallest|bigger|"
            r"biggest|dominat\w*|wins)",
            rf"{_PM_ONE} (?:peaks? )?(?:in|at|during|=|is) (?:the )?(?:optimi[sz]er )?"
            r"(?:step|update)",
            rf"(?:{_PM_ACT}|they) {G(3)}(?:small|tiny) {G(6)}(?:optimi[sz]er|step|update) "
            rf"{G(4)}(?:higher|highest|larger|largest|peak|dominat\w*)"),
            weight=1.0, hint="with a batch of 1 the activations are tiny, so the optimizer step "
                             "is the highest point"),
    ),
    misconceptions=(
        Misconception("gradients or optimizer state grow with the batch", (
            rf"(?<!logits )(?<!logit )(?:gradients?(?! of (?:the )?logits?)|grads|"
            rf"optimi[sz]er state|adam state|moments|parameters|weights) "
            rf"{G(3)}(?:scale|grow|increase|depend)\w* {G(3)}(?:with|as|on) {G(3)}{_PM_B}",
            r"(?:momentum|moments?|gradients?|grads|state) (?:for|per|of) (?:every|each) "
            r"(?:sample|example|sequence)",
            rf"(?:each|every) (?:sample|example|sequence) {G(3)}(?:produces?|has|gets|needs|keeps)"
            rf" {G(2)}(?:own )?(?:gradients?|grads|momentum|moments|optimi[sz]er state)",
            rf"(?:bigger|larger|more) (?:batch\w*|samples) {G(3)}(?:needs?|means?|has|makes?) "
            rf"{G(2)}more {G(3)}(?:copies of the )?(?:weights|parameters|gradients|grads|moments|"
            r"optimi[sz]er state)"),
            penalty=0.4,
            correction="gradients and optimizer state have the size of the parameters, whatever "
                       "the batch"),
        Misconception("activations do not depend on the batch", (
            rf"{_PM_ACT} {G(4)}(?:independent of|regardless of|the same (?:for|at|whatever)) "
            rf"{G(3)}{_PM_B}",
            rf"{_PM_ACT} {G(4)}no (?:larger|bigger|smaller)"),
            penalty=0.4, fatal=True,
            correction="activations are proportional to the batch size"),
        Misconception("activations are freed by the end of the forward pass", (
            rf"(?:end|after) {G(3)}forward {G(4)}{_PM_ACT} {G(3)}(?:freed|released|gone|"
            r"discarded|deleted)",),
            penalty=0.3,
            correction="the saved activations stay alive until backward has used them"),
        Misconception("activations are still alive in the optimizer step", (
            rf"{_PM_ACT} (?:are |is )?(?:still )?(?:held|alive|live|kept|stored|resident|present|"
            r"in memory) (?:until|during|through|throughout|in) (?:the )?(?:optimi[sz]er )?"
            r"(?:step|update)",),
            penalty=0.3,
            correction="backward frees each layer's activations: none are left in the step"),
        Misconception("the optimizer state is allocated again at every step", (
            rf"(?:allocat|creat|re ?allocat|recreat|rebuil)\w* {G(6)}(?:again|anew|afresh|from "
            rf"scratch) (?:in |at |on |for |during )?(?:every|each) {G(2)}"
            r"(?:step|update|iteration)",),
            penalty=0.3,
            correction="the optimizer state is created once, at the first step, and then kept"),
        Misconception("gradients are live at the end of the forward pass", (
            r"(?:after|end of) (?:the )?forward(?: pass)? , (?:(?!(?:not|no|never|step|update|"
            r"optimi[sz]er|backward|then|later) )[^ .]+ ){0,8}(?:the |all )?"
            rf"(?:gradients?|grads)(?! of) {G(6)}(?:are |is )?(?:live|alive|present|in memory|"
            r"held)",),
            penalty=0.3,
            correction="zero_grad(set_to_none=True) freed the gradients: after the forward pass "
                       "there are none until backward makes them"),
    ),
    model_answer=("With a batch of 16 the activations dominate: right after the forward pass every"
                  " saved activation is still alive, on top of the parameters and the optimizer "
                  "state. Activations scale with the batch size; parameters, gradients and "
                  "optimizer state do not. With a batch of 1 the activations are tiny, so the "
                  "largest moment is the optimizer step, where all the gradients and the Adam "
                  "state are live together with the temporaries of the update."),
    explanation=("Activations are proportional to the batch; model states are not. When the "
                 "activations become small, the optimizer step (parameters + all gradients + state"
                 " + temporaries) is the highest point."),
    topic=(r"activation\w*", r"gradient\w*", r"optimi[sz]er", r"batch\w*", r"peak", r"forward",
           r"backward", r"parameters?", r"moments?", r"temporar\w*"),
    course_text=(
        "The peak sits right after the forward pass: the first backward ops allocate the gradient "
        "of the logits (as large as the logits) while every saved activation is still alive.",
        "Activations scale with the batch; parameters, gradients and optimizer state do not.",
        "optimizer: the state (created at the very first step) and the temporaries of the update.",
        "backward: each layer's activations are released once it has been differentiated, while "
        "the gradients appear;",
        "it updates all parameters at once, with temporaries about the size of all parameters",
    ),
)

_BC_GRAD = r"(?:gradients?|grads|gradient precision)"
# a gap that stays on one side of a comparison ("ZeRO keeps X while HF keeps Y")
_BC_SIDE = ("while", "whereas", "but", "unlike", "than", "vs", "versus", "and", "hf", "hugging",
            "zero", "other")
_BC_HF = r"(?:hugging face|hf)(?: convention| accounting| count| one)?"
_BC_ZERO = r"zero(?: convention| accounting| count| one)?"
_BC_16 = r"(?:fp16|bf16|half precision|half|2 bytes?|2 b|two bytes)"
_BC_32 = r"(?:fp32|full precision|single precision|4 bytes?|4 b|four bytes)"
BYTES_CONVENTIONS = Rubric(
    id="bytes_conventions",
    question=("Two colleagues budget the model states for fine-tuning a 7B model with mixed-"
              "precision AdamW. One says 112 GB, the other 126 GB. Where does the difference come "
              "from, and which change would bring the model states under 80 GB per GPU?"),
    concepts=(
        Concept("16 vs 18 bytes per parameter", (
            rf"(?:16|sixteen|18|eighteen) {G(1)}(?:bytes?|b)\b",
            r"2 ?\+ ?2 ?\+ ?12|6 ?\+ ?4 ?\+ ?8",
            rf"(?:7|seven) ?b(?:illion)? {G(1)}(?:x|times) (?:16|18|sixteen|eighteen)(?![0-9])",
            r"(?:2|two) (?:bytes?|b) (?:each|per (?:param\w*|weight\w*))",
            r"(?:7|seven) ?b(?:illion)? (?:x|times) (?:2|two) (?:bytes?|b)\b",
            r"(?:2|two) (?:extra|more|additional) bytes?"),
            weight=1.0, hint="the ZeRO convention counts 16 bytes per parameter, the Hugging Face "
                             "convention 18 bytes"),
        Concept("the gradients: fp32 (4 bytes) vs fp16 (2 bytes)", (
            rf"{_BC_GRAD} {G(6)}(?:fp32|full precision|single precision|32 bits?|4 bytes?|four "
            rf"bytes)",
            rf"(?:fp32|full precision|single precision|32 bits?|4 bytes?) {G(3)}{_BC_GRAD}",
            rf"{_BC_GRAD} {G(8)}(?:instead of|rather than|vs|versus|not) {G(3)}"
            rf"(?:fp16|bf16|half|2 bytes?|16 bits?)",
            rf"{_BC_GRAD} (?:, )?(?:2|two|fp16|bf16) (?:vs|versus|or|and|to) (?:4|four|fp32)",
            rf"{_BC_GRAD} (?:\. |, )?{_PM_L}{{0,6}}{_BC_16} {_PM_L}{{0,12}}{_BC_32}",
            rf"{_BC_GRAD} (?:\. |, )?{_PM_L}{{0,6}}{_BC_32} {_PM_L}{{0,12}}{_BC_16}",
            rf"{_BC_GRAD} {G(2)}{_BC_16} {_PM_L}{{0,8}}(?:them|they|it|theirs) {G(2)}{_BC_32}",
            rf"(?:slot|extra bytes?|2 bytes?|two bytes|the rest) {G(3)}(?:is|are) {G(2)}{_BC_GRAD}",
            rf"difference {G(2)}(?:is|are|comes? from|lies in) {G(2)}{_BC_GRAD}",
            rf"(?:gap|difference|14 gb) {G(2)}(?:is|are|comes? from|lies in) {G(2)}{_BC_GRAD}",
            rf"(?:comes?|stems?|arises?) from {G(2)}{_BC_GRAD}",
            rf"(?:differ|disagree|diverge)\w* {G(3)}(?:in|on|about|over)(?: \.)? {G(5)}{_BC_GRAD}"),
            weight=1.5,
            hint="the difference is the gradients: 4 bytes in fp32 instead of 2 bytes in fp16"),
        Concept("where the fp32 weights and the 16-bit copy are counted", (
            rf"master {G(2)}(?:copy|weights?|params?|parameters?)",
            rf"(?:fp16|bf16|half|16 bit) {G(3)}copy", rf"copy {G(4)}(?:fp16|bf16|half|16 bit)",
            rf"(?:fp32|full precision) {G(2)}(?:weights?|parameters?|params?|copy)"),
            weight=0.5, hint="ZeRO counts the fp32 master weights in the optimizer state, Hugging "
                             "Face counts fp32 weights plus a 16-bit copy"),
        Concept("a fix: 8-bit optimizer, ZeRO sharding or offloading", (
            r"8 ?bits?(?: adamw?| optimi[sz]ers?| adam| moments)?",
            r"zero(?: stage ?[123]| ?[123]| sharding| partitioning)",
            r"shard\w*", r"fsdp", r"offload\w*", r"partition\w*", r"lora|adapters?"),
            weight=1.0, hint="an 8-bit optimizer or ZeRO sharding across GPUs cuts the model "
                             "states under 80 GB"),
    ),
    misconceptions=(
        Misconception("the difference is activations, master weights or the optimizer state", (
            rf"(?:difference|gap|14 gb) {G(6)}activations?",
            rf"activations? {G(6)}(?:explain|account|cause)\w* {G(3)}(?:difference|gap)",
            rf"(?:difference|gap|14 gb) {G(3)}(?:is|are|comes? from|lies in|due to) {G(3)}"
            rf"(?:master|16 bit copy|fp16 copy|bf16 copy|optimi[sz]er state|adam|moments)",
            rf"(?:zero|hf|hugging face) {G(3)}(?:does|do) not {G(2)}(?:keep|have|store|count) "
            rf"{G(3)}(?:master|fp32 (?:copy|weights))"),
            penalty=0.4, fatal=True,
            correction="both conventions keep the same fp32 weights, 16-bit copy and moments; "
                       "only the gradients differ (fp16 vs fp32); activations come on top"),
        Misconception("says both count the gradients at the same precision", (
            rf"{_BC_GRAD} {G(4)}(?:same|identical|equal) (?:precision|dtype|size|bytes)",),
            penalty=0.4, fatal=True,
            correction="ZeRO counts fp16 gradients (2 bytes), Hugging Face fp32 gradients (4)"),
        Misconception("swaps the two conventions", (
            rf"{_BC_ZERO} {G(4, _BC_SIDE)}{_BC_GRAD} {G(2, _BC_SIDE)}(?:in |as |at )?{_BC_32}"
            r"(?![0-9])",
            rf"{_BC_ZERO} {G(3, _BC_SIDE)}{_BC_32} {_BC_GRAD}",
            rf"{_BC_HF} {G(4, _BC_SIDE)}{_BC_GRAD} {G(2, _BC_SIDE)}(?:in |as |at )?{_BC_16}"
            r"(?![0-9])",
            rf"{_BC_HF} {G(3, _BC_SIDE)}{_BC_16} {_BC_GRAD}",
            rf"(?:and|while|whereas|but) {_BC_HF} (?:in|at|as) {_BC_16}(?! copy)",
            rf"(?:and|while|whereas|but) {_BC_ZERO} (?:in|at|as) {_BC_32}(?! (?:copy|master))",
            rf"{_BC_ZERO} (?:is|=|gives|counts|means|uses) {G(1)}(?:18 (?:bytes?|b)|126)",
            rf"{_BC_HF} (?:is|=|gives|counts|means|uses) {G(1)}(?:16(?! bit)|112)"),
            penalty=0.4, fatal=True,
            correction="ZeRO is the 16-byte count with fp16 gradients, Hugging Face the 18-byte "
                       "count with fp32 gradients"),
        Misconception("denies that the gradients make the difference", (
            rf"(?:nothing|not) (?:\w+ )?to do with {G(2)}{_BC_GRAD}",
            rf"not (?:a question|a matter|about|because of|due to|from) (?:of )?"
            rf"{G(4, ('but', 'rather', 'only'))}{_BC_GRAD}",
            rf"(?:difference|gap|14 gb|extra bytes?|2 bytes?) {G(3)}(?:is|are|comes?|lies|has) "
            rf"(?:not|nothing) {G(4, ('but', 'rather', 'only'))}{_BC_GRAD}",
            rf"{_BC_GRAD} {G(3)}(?:are|is) not {G(2)}(?:the )?(?:difference|cause|reason|source)",
            rf"agree\w* (?:on|about) {G(2)}{_BC_GRAD}"),
            penalty=0.4, fatal=True,
            correction="the whole difference is the gradients: 2 bytes (fp16) vs 4 bytes (fp32)"),
        Misconception("the difference is a ZeRO stage or sharding", (
            rf"(?:difference|gap|14 gb) {G(3)}(?:is|are|comes? from|lies in|due to|because of|"
            rf"reflects) {G(3)}(?:(?:zero )?stages?|shard\w*|partition\w*)",
            rf"(?:zero stages?|stages? ?[123]?|shard\w*|partition\w*) {G(6)}(?:account|explain|"
            rf"cause)\w* (?:for )?{G(2)}(?:difference|gap|14 gb)",
            rf"(?:one|first|the other|second) {G(3)}(?:assumes?|uses?|picks?) {G(2)}"
            r"(?:zero )?stage"),
            penalty=0.4, fatal=True,
            correction="both counts are for one GPU without sharding; they differ in the "
                       "gradients' dtype"),
        Misconception("denies that sharding, offloading or an 8-bit optimizer helps", (
            rf"(?:shard\w*|zero(?: stage ?[123]| ?[123])?|fsdp|offload\w*|lora|partition\w*) "
            rf"{_PM_L}{{0,8}}(?:does|do|will|would|can|could) not (?:really )?(?:reduce|cut|"
            rf"lower|help|shrink|decrease|save|change {G(2)}per gpu)",),
            penalty=0.4,
            correction="ZeRO sharding divides the model states by the number of GPUs; offloading "
                       "moves them to the CPU"),
        Misconception("only one convention keeps the fp32 master weights", (
            rf"only (?:the )?(?:{_BC_HF}|{_BC_ZERO}) {G(3)}(?:master|fp32 (?:copy|weights)|"
            r"(?:16 bit|fp16|bf16) copy)",),
            penalty=0.3,
            correction="both conventions keep fp32 weights; they differ only in the gradients"),
        Misconception("a wrong per-GPU count for a ZeRO stage", (
            rf"(?:zero(?: stage)? ?|stage ?)[12](?![0-9]) {_PM_L}{{0,8}}"
            r"(?:leaves |gives |is |= |to )?14 gb",
            rf"(?:zero|shard\w*) (?:stage ?[123] )?(?:on|with|across) (?:a single|one|1) gpu "
            rf"{G(6)}(?:fit|under|below)"),
            penalty=0.15,
            correction="stage 1 shards only the optimizer state (5.5 bytes/param over 8 GPUs, "
                       "38.5 GB); 14 GB per GPU is stage 3, and one GPU shards nothing"),
        Misconception("says nothing brings the model states under 80 GB", (
            rf"no (?:change|way|fix|method|trick) {_PM_L}{{0,10}}(?:can|could|will|would) "
            rf"{G(3)}(?:bring|get|fit|put)",
            rf"(?:impossible|can not) {G(6)}(?:under|below) 80"),
            penalty=0.4, correction="an 8-bit optimizer (10 bytes/param, 70 GB) or ZeRO sharding "
                                    "over 8 GPUs gets under 80 GB"),
        Misconception("a fix that does not cut the model states", (
            rf"(?:checkpointing|smaller batch\w*|batch size|empty_cache|empty cache|autocast) "
            rf"{_PM_L}{{0,8}}(?:under|below) 80",
            rf"(?:under|below) 80 gb {_PM_L}{{0,6}}(?:checkpointing|smaller batch|empty_cache|"
            r"empty cache|autocast)"),
            penalty=0.4, correction="checkpointing, a smaller batch or autocast change the "
                                    "activations, not the model states"),
        Misconception("a wrong bytes count for the 8-bit optimizer", (
            rf"8 bit {_PM_L}{{0,8}}(?:hugging face|hf|18 b\w*) {_PM_L}{{0,8}}(?:70|10 b\w*)",
            rf"(?:hugging face|hf|18 b\w*) {_PM_L}{{0,8}}8 bit {_PM_L}{{0,8}}(?:70|10 b\w*)",
            rf"(?:16|sixteen) (?:bytes?|b)\b {G(4)}126|(?:18|eighteen) (?:bytes?|b)\b {G(4)}112"),
            penalty=0.3,
            correction="8-bit moments save 6 bytes/param: 10 bytes (70 GB) in the 16-byte count, "
                       "12 bytes (84 GB) in the 18-byte one"),
    ),
    model_answer=("The first counts 16 bytes per parameter (ZeRO): fp16 weights and gradients plus"
                  " 12 bytes of optimizer state with the fp32 master weights. The second counts 18"
                  " bytes (Hugging Face): fp32 weights plus a 16-bit copy, and gradients kept in "
                  "fp32, 4 bytes instead of 2. An 8-bit optimizer (10 bytes per parameter, 70 GB) "
                  "or ZeRO sharding across GPUs brings it under 80 GB."),
    explanation=("16 = 2 + 2 + 12 (ZeRO) and 18 = 6 + 4 + 8 (Hugging Face); the conventions differ"
                 " in the dtype of the gradients. 8-bit Adam keeps 2 bytes of moments instead of 8:"
                 " 10 bytes/param = 70 GB in the 16-byte count (12 bytes = 84 GB = 78 GiB with fp32"
                 " gradients: under an 80 GiB card, not under 80 GB); ZeRO-3 on 8 GPUs: 14 GB per "
                 "GPU. GB = 10^9 bytes, GiB = 2^30 bytes (ml.GB, ml.GiB)."),
    topic=(r"bytes?", r"gradients?", r"fp32", r"fp16", r"weights?", r"optimi[sz]er", r"adam\w*",
           r"zero", r"convention\w*"),
    course_text=(
        "Both keep the same things, an fp32 copy of the weights, Adam's two fp32 moments and a "
        "16-bit copy of the weights for the matmuls, except the gradients.",
        "the model is fp16, so its gradients are fp16 (2 bytes), and the fp32 weights live in "
        "the optimizer as the \"master\" copy.",
        "The Hugging Face accounting describes AMP-style training: the model stays fp32, "
        "torch.autocast makes the 16-bit copy on the fly, and so the gradients land in fp32 "
        "(4 bytes): \"gradients are always kept in fp32\".",
        "store Adam's two moments in 8 bits each: 2 bytes/param of state instead of 8, so 18 "
        "becomes 12 bytes/param (the last line above).",
        "shards the model states across the N_d data-parallel GPUs instead of copying them to "
        "each.",
    ),
)

# ------------------------------------------------------------------ claims with a direction
# Facts of the course about WHICH quantity moves with WHAT, shared by every rubric whose
# question touches them. Each is written once, as the inverted claim (the right verb with the
# wrong subject, or the wrong direction), and becomes a misconception of those rubrics: a
# sentence that moves the wrong quantity or the wrong way costs its penalty even where its
# words also earn a concept. The correct statements of the same facts are tested not to fire
# (tests/grading/test_rubric.py, test_a_fact_with_a_direction_*).
_MSX = _MS.replace("|weights|", "|weights?|")   # the model states, "the weight" too
_MSX_LIST = _listed(_MSX)
# the quantity as the claim's subject: not the object of a preposition ("stored for gradients
# grow ..."), not the logits' gradient (an activation of the last layer, which does grow)
_SUBJECT = r"(?<!for )(?<!of )(?<!to )(?<!from )(?<!logits )(?<!logit )(?<!logits s )"
_GROWS = r"(?:grow|scale|depend|increase|rise|go up|goes up)\w*"


@dataclass(frozen=True)
class Direction:
    """A fact with a direction: ``wrong`` are the patterns of its inverted claim."""

    name: str
    wrong: tuple[str, ...]
    correction: str
    rubrics: tuple[str, ...]
    penalty: float = 0.4

    def misconception(self) -> Misconception:
        return Misconception(self.name, self.wrong, penalty=self.penalty,
                             correction=self.correction)


DIRECTIONS = (
    Direction(
        "says GradScaler grows the scale, or still steps, on an overflow",
        # "when it finds an inf, it doubles the scale": a condition's comma, then the claim
        (rf"(?:inf|nan|infinit\w*|overflow\w*) {G(6)}(?:, {G(3)})?(?:doubl\w*|increas\w*|rais\w*|"
         rf"grows?) {G(2)}(?:it|the scale|scale|s)\b",
         rf"(?:inf|nan|infinit\w*|overflow\w*) {G(6)}(?:still|anyway) (?:applies|takes|does|runs|"
         rf"performs) {G(2)}(?:the )?(?:step|update)"),
        "on inf or NaN GradScaler skips the step and halves the scale; it doubles the scale only "
        "after a run of steps without one (growth_interval, 2000)",
        ("fp16_loss_scaling",)),
    Direction(
        "says the model states (weights, gradients, optimizer state) grow with the batch",
        (rf"{_SUBJECT}{_MSX_LIST} {G(3)}{_GROWS} {G(2)}(?:with|on) {G(3)}{_BATCH}",
         rf"{_SUBJECT}{_MSX_LIST} {G(3)}(?:are|is) proportional to {G(3)}{_BATCH}",
         # "the activations grow with the batch, and so do the gradients": the claim by ellipsis
         rf"{_GROWS} {G(3)}(?:with|on) {G(3)}{_BATCH}\w* (?:, )?(?:and )?so (?:do|does) "
         rf"(?:the )?{_MSX_LIST}"),
        "only the activations grow with the batch; parameters, gradients and optimizer state "
        "are one set per parameter, whatever the batch",
        ("peak_moves", "activations_scaling", "oom_before_batch", "bytes_conventions",
         "sharding_when_why")),
    Direction(
        "says accumulation divides the model states' memory by k",
        (rf"(?:divid|cut|reduc|shrink|split)\w* {G(2)}{_MSX_LIST} (?:state )?memory "
         rf"{G(2)}by (?:k|the number of micro ?batch\w*)",
         rf"{_SUBJECT}{_MSX_LIST} (?:state )?memory {G(3)}(?:divided|cut|reduced|shrinks?) "
         rf"{G(2)}by (?:k|the number of micro ?batch\w*)"),
        "accumulation shrinks only the activations (one micro-batch at a time); the model "
        "states stay whole",
        ("oom_before_batch", "activations_scaling", "sharding_when_why")),
    Direction(
        "says plain data parallelism (DDP) splits the model states",
        (rf"(?:plain |vanilla |standard |ordinary )?(?:ddp|distributeddataparallel|"
         rf"(?:plain|vanilla|standard|ordinary) data parallel\w*) {G(3, avoid=('by', 'with'))}"
         rf"(?:split|shard|partition|divid|distribut)\w* {G(3)}(?:{_STATES}|{_MSX_LIST})",
         rf"(?:ddp|distributeddataparallel) {G(3)}(?:split|shard|partition|divid)\w* "
         rf"{G(3)}by (?:the number of )?{_GPUS}",
         # "plain DDP on 8 GPUs, which spreads the states": a relative clause says what DDP does
         rf"(?:ddp|distributeddataparallel|plain data parallel\w*) [^,.]{{0,30}}, (?:which|that) "
         rf"(?:split|shard|partition|divid|distribut|spread)\w* {G(3)}(?:{_STATES}|{_MSX_LIST})",
         # "plain DDP over 8 GPUs ..., since each GPU then stores only an eighth of them": a share
         # per GPU said of DDP (of the batch it is true, so the batch's words end the claim)
         r"(?:ddp|distributed data parallel|plain data parallel\w*) (?:(?!(?:not|no|never|unlike|"
         r"whereas|while|but|instead|zero\S*|stage|fsdp\S*|shard\w*|batch\w*|data|activations?|"
         r"inputs?|samples?|examples?|tokens?|micro\S*) )[^ ]+ ){0,25}(?:only )?(?:an? |one )?"
         r"(?:eighth|quarter|fourth|fraction|1 ?/ ?(?:n|8|4|k))\b(?! of (?:the |its |each )?"
         r"(?:global |total |whole |full )?(?:batch|data|samples|examples|inputs|tokens))"),
        "DDP keeps a full copy of the weights, gradients and optimizer state on every GPU; "
        "only ZeRO/FSDP divides them",
        ("sharding_when_why", "oom_before_batch", "bytes_conventions", "peak_moves")),
    Direction(
        "says a memory that grows linearly grows quadratically",
        (rf"(?:kv cache|the cache|cache memory|cache size|cache s memory) {G(4)}"
         r"(?:quadratic\w*|squared|with the square)",
         rf"activations? {G(4)}(?:quadratic\w*|squared|with the square) {G(3)}{_BATCH}"),
        "the KV cache grows linearly with the tokens (and the batch); activations grow "
        "linearly with the batch",
        ("kv_cache_tradeoff", "activations_scaling")),
    Direction(
        "says the scaler raises the scale when it finds an overflow",
        (r"(?:overflow\w*|inf\w*|nan\w*|infs or nans|inf or nan) "
         rf"{G(5)}(?:, {G(3)})?(?:doubl|increas|rais|grow)\w* {G(2)}(?:the )?(?:loss )?scal\w*",
         rf"(?:the )?scale (?:is |gets )?(?:doubled|increased|raised) {G(3)}"
         r"(?:on|after|when|if) {G(2)}(?:an )?(?:overflow\w*|inf\w*|nan\w*)"),
        "on an inf/NaN the scaler skips the step and HALVES the scale; it grows the scale "
        "again after a run of clean steps",
        ("fp16_loss_scaling",)),
)



# What each technique shrinks (notebooks 02-06, 10; REFERENCE.md): a claim that it shrinks
# another consumer is a misconception on every question, whatever words it is made in. Each
# entry: the technique's names, the verbs its claim uses, the consumers it really shrinks, and
# why. The consumer a verb's object list names is checked against the technique NEAREST before
# it in the same clause ("ZeRO-1 shards the optimizer state, ZeRO-2 also the gradients").
_EFFECT_CONSUMERS = {
    "parameters": r"(?:(?:model |master |fp32 )?(?:weights|parameters|params))",
    "gradients": r"(?<!activation )(?<!activations )(?:gradients|grads)",
    "optimizer state": (r"(?:optimi[sz]er states?|adam(?: s)? (?:states?|moments)|(?:the )?(?:two |2 )?"
                        r"moments|exp_avg\w*|momentum buffers?)"),
    "activations": r"(?:(?:saved |stored )?activations?|saved tensors|intermediates)",
    "live tensors": (r"(?:[a-z_.]*memory_allocated|allocated (?:memory|bytes)|live tensors|"
                     r"(?:unused |dead |unreferenced )?tensors)"),
}
_SHRINK_VERB = r"(?:halv\w*|shrink\w*|cuts?|compress\w*|lowers?|reduces?|shorten\w*|divid\w*)"
_SHARD_VERB = r"(?:shard\w*|split\w*|partition\w*|divid\w*|distribut\w*|slic\w*|spread\w*|cuts?|shrink\w*)"
_FREE_VERB = r"(?:frees?|releas\w*|delet\w*|clears?|lowers?|reduces?|drops?|shrink\w*|empties)"
_TECHNIQUES = {  # name: (its patterns, verb, the consumers it shrinks, the course's words)
    "mixed precision": (r"(?:mixed precision|autocast|amp)", _SHRINK_VERB, {"activations"},
                        "under autocast the fp32 weights, their gradients and Adam's moments stay "
                        "as they are; what is computed in 16 bits (the activations) shrinks"),
    "gradient checkpointing": (r"(?:(?:gradient |activation )?checkpointing|recomputation)",
                               _SHRINK_VERB, {"activations"},
                               "checkpointing drops saved activations and recomputes them; the "
                               "parameters, gradients and optimizer state are untouched"),
    "gradient accumulation": (r"(?:gradient accumulation|accumulation|micro ?batching)",
                              _SHRINK_VERB, {"activations"},
                              "accumulation holds one micro-batch's activations at a time; the "
                              "parameters, gradients and optimizer state stay whole"),
    "ZeRO-1": (r"(?:zero ?(?:stage )?1|stage 1|zeroredundancyoptimizer)", _SHARD_VERB,
               {"optimizer state"}, "ZeRO-1 shards the optimizer state only; every rank keeps "
               "all parameters and gradients"),
    "ZeRO-2": (r"(?:zero ?(?:stage )?2|stage 2)", _SHARD_VERB, {"optimizer state", "gradients"},
               "ZeRO-2 shards the optimizer state and the gradients, not the parameters"),
    "ZeRO-3/FSDP": (r"(?:zero ?(?:stage )?3|stage 3|fsdp2?|fully sharded(?: data parallel)?)",
                    _SHARD_VERB, {"optimizer state", "gradients", "parameters"},
                    "ZeRO-3/FSDP shard the model states (parameters, gradients, optimizer "
                    "state); each rank's activations are its own micro-batch's, unchanged"),
    "DDP": (r"(?:ddp|distributeddataparallel|distributed data parallel|plain data parallel\w*)",
            _SHARD_VERB, {"activations"},
            "DDP replicates the model: every GPU keeps all parameters, gradients and optimizer "
            "state (only each GPU's share of the batch, its activations, is smaller); sharding "
            "the model states is what ZeRO and FSDP add"),
    "empty_cache": (r"(?:[a-z_.]*empty_cache|emptying the cache)", _FREE_VERB, set(),
                    "empty_cache returns cached, unused blocks to the driver: no tensor is "
                    "freed and memory_allocated does not change"),
}
_ANY_TECHNIQUE = "|".join(t[0] for t in _TECHNIQUES.values())
# a word that ends the claim's reach: a contrast, a limit, a negation, a new clause
_EFFECT_STOP = (r"(?:not|no|never|nor|non|without|only|just|except|but|while|whereas|unlike|"
                r"rather|instead|than|so|because|since|if|when|which|stay\w*|remain\w*|keeps?|"
                r"kept|unchanged|untouched|neither|none|nothing)")
_EFFECT_WORD = rf"(?!(?:{_EFFECT_STOP}|{_ANY_TECHNIQUE}) )[^ .]+"
# ... and the consumer is not the subject of a clause of its own ("..., and the gradients are
# summed in place"; "the weights stay fp32")
_EFFECT_AFTER = (r"(?! (?:[^ .,]+ ){0,3}(?:stay\w*|remain\w*|unchanged|untouched|in fp32|"
                 r"as they are|as it is|(?:are|is) not)\b)(?! (?:are|is|were|was|get|gets|must|"
                 r"can|will|would|need|needs|have|has|do|does)\b)")


def _effect_direction(name: str) -> Direction:
    pattern, verb, shrinks, why = _TECHNIQUES[name]
    wrong = [c for c in _EFFECT_CONSUMERS if c not in shrinks
             and (c != "live tensors" or name == "empty_cache")]
    consumers = "|".join(_EFFECT_CONSUMERS[c] for c in wrong)
    said = ("frees tensors" if name == "empty_cache" else "shrinks the " + (
        ", the ".join(wrong[:-1]) + " or the " if len(wrong) > 1 else "") + wrong[-1])
    return Direction(
        f"says {name} {said}",
        # "bf16 autocast: besides storing activations in 16 bits it also halves the parameters,
        # gradients and Adam state"; "ZeRO stage 1 over 8 GPUs: it splits ...": a colon or a
        # sentence's end crossed where the next words go on about the technique
        # "ZeRO stage 1, which shards the gradients": a relative clause right after the
        # technique's name says what the technique does ("which" elsewhere ends the reach)
        (rf"{_SUBJECT}(?:{pattern}) (?:,? ?(?:which|that) )?(?:(?:{_EFFECT_WORD} ){{0,4}}\. "
         rf"(?=(?:it|this|that|they|besides|also) ))?(?:{_EFFECT_WORD} ){{0,10}}{verb} "
         rf"(?:{_EFFECT_WORD} ){{0,8}}(?:{consumers})\b{_EFFECT_AFTER}",),
        why, tuple(RUBRICS_USING_EFFECTS), penalty=0.4)


RUBRICS_USING_EFFECTS = ("oom_before_batch", "checkpointing_cost", "fp16_loss_scaling",
                         "accumulation_equivalence", "activations_scaling",
                         "allocated_vs_reserved", "sharding_when_why", "kv_cache_tradeoff",
                         "peak_moves", "bytes_conventions")
DIRECTIONS += tuple(_effect_direction(name) for name in _TECHNIQUES)
DIRECTIONS += (
    Direction(
        "says loss scaling acts on the forward pass or the activations",
        # the scaler multiplies the loss (so the backward's gradients); the forward runs as it was
        (rf"{_SCALER} {G(4)}(?:also )?(?:protects?|scales?|rescales?|guards?|keeps?|clamps?|"
         rf"changes?) {G(2)}(?:the )?(?:forward(?: pass)?|activations?|logits|outputs?)\b",),
        "the scaler multiplies the loss, so only the backward's gradients are scaled; the "
        "forward pass and its activations run as before (an overflow in the forward is not "
        "what loss scaling prevents)",
        ("fp16_loss_scaling", "oom_before_batch")),
    Direction(
        "says checkpointing doubles the step time",
        # one extra forward of a step that costs about three (forward + a backward of two):
        # about a third more, not twice the time (checkpointing_cost's FACTS)
        (rf"(?:recomput\w*|checkpointing|extra forward(?: pass)?|rerun\w*|second forward) "
         rf"{G(4)}(?:roughly |about |nearly |almost |basically )?(?:doubl\w*|triples?|twice|2 ?x) "
         rf"{G(2)}(?:the )?(?:time|step|training|compute|cost|runtime)",),
        "the recomputation is about one extra forward of a step that costs about three "
        "(a backward is about two forwards): roughly a third more time, not twice",
        ("checkpointing_cost", "oom_before_batch")),
    Direction(
        "says checkpointing makes the gradients approximate",
        # recomputation reruns the same ops (the RNG state restored): the same values
        (rf"(?:recomput\w*|rebuilt|recreated|checkpointing|checkpointed) {G(6)}"
         rf"(?:(?:only )?approximat\w*|inexact|lossy|less accurate|slightly different)",
         rf"(?:price|cost)\w* {G(3)}(?:also )?(?:some |a little |a bit of )?(?:accuracy|precision)",
         rf"gradients? {G(4)}(?:slightly|a bit|a little) (?:different|off|noisier|wrong)"),
        "the recomputation reruns the same operations (with the RNG state restored for "
        "dropout), so the activations and the gradients are the same as without checkpointing; "
        "the price is time, not accuracy",
        ("checkpointing_cost", "oom_before_batch")),
    Direction(
        "says the gradients stay allocated from one step to the next",
        # the course's loop zeroes with set_to_none=True (torch's default): the gradients are
        # freed before the next forward, so they are not alive when the forward ends
        (rf"(?:gradients?|grads)(?: ,)? (?:which |that )?{G(3)}(?:stay|remain|are kept|kept|"
         rf"persist|survive|linger|are still|still)\w* {G(3)}(?:from|since|across|between|"
         r"over) (?:the |one )?(?:previous|last|prior|earlier|one|two)? ?(?:steps?|iterations?)",),
        "the loop zeroes the gradients with set_to_none=True (torch's default), so they are freed "
        "before the next forward and are not alive when it ends; they exist from backward to "
        "the next zero_grad",
        ("peak_moves", "activations_scaling")),
    Direction(
        "says the optimizer state is created anew and freed at every step",
        # Adam's moments are made at the first step and kept: a model state, not a temporary
        (rf"(?:adam\w*|optimi[sz]er|step) {G(2)}(?:re)?(?:creat|allocat|build|make|mak)\w* "
         rf"{G(2)}(?:exp_avg\w*|moments|(?:its |the |optimi[sz]er )?states?)[^.]{{0,40}}"
         r"(?:fresh|anew|again|from scratch)? ?(?:at|in|on|for|during) (?:every|each) "
         r"(?:optimi[sz]er(?:\.| )?)?step",
         rf"(?:exp_avg\w*|moments|(?:adam|optimi[sz]er) states?) {G(3)}(?:re ?created|"
         rf"rebuilt|reallocated|freed|released|deleted) {G(2)}(?:at|after|in|on) (?:every|each) "
         r"(?:optimi[sz]er )?step"),
        "Adam's two moments are created at the first step and kept from then on, like the "
        "parameters; what the step makes and frees again are the foreach update's temporaries",
        ("peak_moves", "activations_scaling", "oom_before_batch", "bytes_conventions")),
)

# The numbers the course teaches on each question, with their sources (../REFERENCE.md, the
# notebooks): an answer that states one states a number the grader knows, not an unchecked one.
FACTS: dict[str, tuple[str, ...]] = {
    "oom_before_batch": (
        "16-bit activations take 2 bytes instead of 4: about half; under bf16 autocast one GPT-2 "
        "block saved 1.46x the formula against fp32's 2.18x, about 0.67x (03, measured)",
        "checkpointing costs about one extra forward, 30-40% more time (Chen et al. 2016; "
        "Korthikanti et al. 2022, Table 4: +39%), selective recomputation 2-7%",
        "8-bit Adam keeps about 2 bytes of state per parameter instead of 8 (Dettmers et al. "
        "2021); model states 16 or 18 bytes per parameter (ZeRO; Hugging Face)",
    ),
    "checkpointing_cost": (
        "a backward costs about two forwards: a step of 3F becomes 4F, one extra forward, about "
        "33% more (Chen et al. 2016: ~30%; Korthikanti et al. 2022: 30-40%, one 22B layer 19.6 "
        "-> 27.2 ms, +39%; selective 2-7%)",
        "peak about (n/k + k) layers' activations, at least 2 sqrt(n) at k = sqrt(n); a "
        "1000-layer ResNet 48 GB -> 7 GB (Chen et al. 2016); GPT-2 1.5B ~60 GB -> ~8 GB (ZeRO)",
    ),
    "fp16_loss_scaling": (
        "fp16: 5 exponent and 10 mantissa bits, max 65504, smallest normal 6.10e-5 (2^-14), "
        "smallest subnormal 5.96e-8 (2^-24), 65520 and above overflow (Micikevicius et al. 2018)",
        "bf16: fp32's 8 exponent bits, range about 1.18e-38 to 3.4e38, 7 mantissa bits (8 with "
        "the implicit one); fp32 23 mantissa bits",
        "torch.amp.GradScaler starts at 65536 (2^16), halves the scale (backoff 0.5) and skips "
        "the step on inf or nan, doubles it (growth 2) after 2000 steps without one",
    ),
    "activations_scaling": (
        "per layer sbh(34 + 5as/h) bytes (Korthikanti et al. 2022); GPT-2 small, s = 1024, b = 8, "
        "h = 768, a = 12: sbh = 6 MiB, 5as/h = 80, 684 MiB a layer, about 8 GiB for 12 layers",
        "model states 16 bytes per parameter: GPT-2 small's 124M parameters about 1.85 GiB "
        "(2 GB); 1.5B -> 24 GB, 7.5B -> 120 GB (Rajbhandari et al. 2020)",
    ),
    "allocated_vs_reserved": (
        "the caching allocator rounds every block up to 512 bytes; requests up to 1 MiB come "
        "from 2 MiB segments, 1-10 MiB from 20 MiB ones (CUDACachingAllocator.cpp); the CUDA "
        "context takes 300-500 MiB up to about 1 GiB (pytorch#40989, #37250)",
    ),
    "sharding_when_why": (
        "16 bytes per parameter with mixed-precision Adam: 7B parameters hold 112 GB of model "
        "states, more than one 80 GB GPU; 1.5B -> 24 GB (Rajbhandari et al. 2020)",
        "per GPU on 8 GPUs for 7B: ZeRO-1 38.5 GB, ZeRO-2 26.25 GB, ZeRO-3 14 GB; 7.5B on 64: "
        "31.4 / 16.6 / 1.9 GB; FSDP moves 3x the parameter bytes a step, 1.5x DDP's 2x",
    ),
    "kv_cache_tradeoff": (
        "2 x layers x kv_heads x head_dim x seq x batch x bytes: Llama-2-7B (32 layers, 32 kv "
        "heads, head_dim 128) in fp16 holds 512 KiB (0.5 MiB) a token, 1 GiB for 2048 tokens; "
        "GQA with 8 kv heads of 32 (or 64) cuts it 4x (8x) (Ainslie et al. 2023)",
    ),
    "peak_moves": (
        "Adam: 8 bytes of state per parameter, two moments; foreach temporaries about one "
        "parameter-sized copy (01, measured on TinyGPT, batch 16 and 1)",
    ),
    "bytes_conventions": (
        "ZeRO 16 bytes (2 + 2 + 12) vs Hugging Face 18 bytes (6 + 4 + 8) per parameter: 7B -> "
        "112 GB vs 126 GB, 14 GB apart; 8-bit AdamW: 12 bytes, 84 GB; ZeRO-1 on 8 "
        "GPUs 4 + 12/8 = 5.5 bytes, 38.5 GB; ZeRO-2 3.75 bytes, 26.25 GB; ZeRO-3 2 bytes, 14 GB",
    ),
}


# True claims an answer makes beside the rubric's ideas, each naming the decisive word it
# vouches for: checked, so not sent to review, and worth no points (the course's own facts).
_SCALE = r"(?:the )?(?:scale|scaling factor|loss scale|s)\b"
TRUE_CLAIMS: dict[str, tuple[str, ...]] = {
    "fp16_loss_scaling": (
        rf"(?:skip\w* {G(3)})?halv\w* {G(2)}{_SCALE}",        # GradScaler on inf/nan
        rf"(?:after|every) {G(4)}(?:steps?|iterations?|runs?) {G(4)}doubl\w*",  # growth_interval
        rf"doubl\w* {G(3)}(?:after|every) {G(4)}(?:steps?|iterations?)",
        rf"(?:grows?|increases?) {G(2)}(?:it|{_SCALE}) {G(3)}(?:again|later|after)",
        r"(?:becomes?|rounds? to|flush\w* to) (?:exactly )?zero",
        rf"(?:same|fp32 s) {G(2)}(?:8 )?(?:bit )?exponent",
    ),
    "checkpointing_cost": (
        rf"gradients? {G(3)}(?:exactly|identical|the same|unchanged|equal)",
    ),
    "accumulation_equivalence": (
        rf"(?:exactly|equal\w*|identical) {G(4)}(?:full ?batch|same) (?:gradient|\.grad)",
        rf"(?:not|isn t|is not|aren t) (?:exactly )?(?:equal|exact|identical|the same) {G(2)}when",
        rf"also (?:breaks?|differs?|fails?) {G(4)}(?:batch ?norm\w*|depends?|independent)",
        rf"sum {G(6)}= {G(3)}grad {G(2)}(?:exactly)?",
    ),
    "allocated_vs_reserved": (
        rf"cached {G(3)}(?:reused|gets reused|re used|recycled|kept for reuse)",
        rf"cached (?:blocks?|memory|part|segments?) {G(4)}(?:reus\w*|flat|plateau\w*)",
    ),
    "sharding_when_why": (
        rf"zero ?(?:1|2|3)\w* {G(3)}also {G(3)}(?:grad\w*|param\w*|weights?|optimi[sz]\w*)",
        rf"also {G(2)}(?:the )?(?:grad\w*|param\w*|weights?) {G(3)}(?:1 / n|1/n|each|per)",
        rf"(?:only|just) shrinks? {G(2)}(?:the )?activations?",
        rf"(?:none|nothing|neither) {G(3)}shrinks? {G(4)}(?:model states|16 bytes|weights|"
        r"parameters)",
        rf"(?:gathers?|all ?gathers?) {G(3)}(?:weights|parameters) twice",
    ),
    "activations_scaling": (
        rf"doubl\w* both {G(4)}4 ?x",
    ),
    "kv_cache_tradeoff": (
        rf"(?:attends?|attention) {G(4)}cached (?:keys|ones|k|values)",
    ),
}


# The parts each question asks for in its own words, and the concepts that answer each: an
# answer that leaves a whole part out is capped (concepts._part_cap). A question with one ask
# ("what would you try before reducing the batch size?") has no parts.
PARTS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "checkpointing_cost": (
        ("why it saves memory", ("activations are not stored: only segment inputs are kept",
                                 "the dropped activations are recomputed")),
        ("why it costs time", ("the dropped activations are recomputed",
                               "it costs extra compute / time",
                               "how big the trade is: ~one extra forward (+20-40% time), "
                               "memory ~sqrt(n)")),
    ),
    "fp16_loss_scaling": (
        ("why fp16 needs loss scaling", ("fp16 has a narrow exponent range",
                                         "small gradients underflow to zero",
                                         "scaling multiplies the loss so gradients become "
                                         "representable")),
        ("why bf16 does not", ("bf16 has fp32's exponent range (8 exponent bits)",)),
    ),
    "accumulation_equivalence": (
        ("why they are equal", ("the gradient is linear: the gradient of a sum/mean is the "
                                "sum/mean of gradients",
                                "backward adds into .grad across micro-batches",
                                "each micro-batch loss is divided by k (weighted by its share)")),
        ("when they are not", ("unequal micro-batch sizes or token counts need weighting by count",
                               "BatchNorm statistics depend on the (micro-)batch",
                               "other sources of difference: dropout/randomness, float "
                               "rounding, clipping")),
    ),
    "activations_scaling": (
        ("why activations decide", ("activations are saved in the forward pass for the "
                                    "backward pass",
                                    "parameters, gradients and optimizer state do not depend "
                                    "on the batch",
                                    "so activations usually dominate / push a step over the "
                                    "limit")),
        ("how they scale with batch and depth", ("activation memory grows linearly with batch "
                                                 "size",
                                                 "activation memory grows linearly with depth "
                                                 "(number of layers)")),
    ),
    "allocated_vs_reserved": (
        ("why nvidia-smi shows more", ("the caching allocator keeps freed blocks for reuse",
                                       "memory_reserved: what the allocator holds, at least the "
                                       "allocated bytes",
                                       "nvidia-smi also counts the CUDA context and other "
                                       "processes")),
        ("why it is not a leak", ("not a leak: cached memory is reused; a leak shows as "
                                  "allocated growing",)),
    ),
    "kv_cache_tradeoff": (
        ("why it is faster", ("the cache keeps every layer's keys and values of the tokens seen "
                              "so far",
                              "each step computes only the new token instead of recomputing the "
                              "prefix")),
        ("what it costs in memory", ("its memory grows linearly with every token and every "
                                     "sequence",
                                     "at long contexts or large batches it outgrows the weights "
                                     "and limits the batch")),
        ("how grouped-query attention helps", ("GQA: query heads share fewer key/value heads, "
                                               "the cache shrinks by heads/kv_heads",)),
    ),
    "bytes_conventions": (
        ("where the difference comes from", ("16 vs 18 bytes per parameter",
                                             "the gradients: fp32 (4 bytes) vs fp16 (2 bytes)",
                                             "where the fp32 weights and the 16-bit copy are "
                                             "counted")),
        ("a change that fits 80 GB", ("a fix: 8-bit optimizer, ZeRO sharding or offloading",)),
    ),
}


def _with_directions(rb: Rubric) -> Rubric:
    extra = tuple(d.misconception() for d in DIRECTIONS if rb.id in d.rubrics)
    rb = dataclasses.replace(rb, facts=rb.facts + FACTS.get(rb.id, ()),
                             true_claims=rb.true_claims + TRUE_CLAIMS.get(rb.id, ()),
                             parts=PARTS.get(rb.id, rb.parts))
    return dataclasses.replace(rb, misconceptions=rb.misconceptions + extra) if extra else rb


RUBRICS: dict[str, Rubric] = {r.id: _with_directions(r) for r in (
    OOM_BEFORE_BATCH, CHECKPOINTING_COST, FP16_LOSS_SCALING, ACCUMULATION_EQUIVALENCE,
    ACTIVATIONS_SCALING, ALLOCATED_VS_RESERVED, SHARDING_WHEN_WHY, KV_CACHE_TRADEOFF, PEAK_MOVES,
    BYTES_CONVENTIONS,
)}
# the names below are the rubrics as graded (with their facts' misconceptions)
(OOM_BEFORE_BATCH, CHECKPOINTING_COST, FP16_LOSS_SCALING, ACCUMULATION_EQUIVALENCE,
 ACTIVATIONS_SCALING, ALLOCATED_VS_RESERVED, SHARDING_WHEN_WHY, KV_CACHE_TRADEOFF, PEAK_MOVES,
 BYTES_CONVENTIONS) = RUBRICS.values()

__all__ = ["RUBRICS", "OOM_BEFORE_BATCH", "CHECKPOINTING_COST", "FP16_LOSS_SCALING",
           "ACCUMULATION_EQUIVALENCE", "ACTIVATIONS_SCALING", "ALLOCATED_VS_RESERVED",
           "SHARDING_WHEN_WHY", "KV_CACHE_TRADEOFF", "PEAK_MOVES", "BYTES_CONVENTIONS"]
