"""Mutants of 07_interview_prep (see tests/mutants/__init__.py): the interview's plausible wrong
answers. The numeric ones are the mistakes the course's notebooks warn about (01: the four
consumers and the ZeRO and Hugging Face conventions; 02: the n/k + k rule, one extra forward;
03: fp16's normal range; 04: GPUs x micro-batch x steps, a mean of means; 06: what each ZeRO
stage shards; 08: QLoRA's 4-bit base; 09: keys AND values, the KV heads; 10: 512-byte
rounding), each named in the feedback by the hidden test's list of known mistakes; the written
ones are a model answer with one false claim or one part of the question left out."""
from mutants import Mutant


def _numeric(id: str, q: str, right: str, wrong: str, says: str, why: str) -> Mutant:
    return Mutant(id=id, cell=f"answer_{q}", find=f'answer_{q} = "{right}"',
                  replace=f'answer_{q} = "{wrong}"', lose=(f"test_{q}",), says=says, klass=0,
                  why=why)


MUTANTS = [
    _numeric("q1_one_adam_moment", "q1", "20.8 GB", "15.6 GB", "two fp32 moments",
             "counts Adam's state as one value per parameter (12 bytes, not 16)"),
    _numeric("q1_no_optimizer", "q1", "20.8 GB", "10.4 GB", "optimizer state left out",
             "parameters and gradients only (8 bytes per parameter)"),
    _numeric("q2_hf_convention", "q2", "104.3 GiB", "117.3 GiB", "hugging face",
             "uses Hugging Face's 18 bytes per parameter where the question asks ZeRO's 16"),
    _numeric("q2_gb_for_gib", "q2", "104.3 GiB", "112 GiB", "gb vs gib",
             "7e9 x 16 bytes written as GiB: the GB figure under the binary unit"),
    _numeric("q5_no_attention_term", "q5", "1552 MiB", "272 MiB", "attention term",
             "34 sbh only: the 5as/h of eager attention's softmax left out"),
    _numeric("q6_one_doubling", "q6", "4x", "2x", "one doubling only",
             "doubles for the batch and forgets the depth"),
    _numeric("q10_no_segment_inputs", "q10", "1.5 GiB", "0.75 GiB", "segment inputs",
             "n/k layers only: the k checkpoints kept across the network left out"),
    _numeric("q11_recompute_backward", "q11", "400 ms", "500 ms", "one extra forward",
             "adds the backward's time again: recomputation reruns the forward, 100 ms"),
    _numeric("q15_one_power_short", "q15", "2^16", "2^15", "one power of two short",
             "2^15 x 1e-9 = 3.3e-5 is still below fp16's smallest normal 2^-14"),
    _numeric("q15_subnormal", "q15", "2^16", "2^6", "subnormals",
             "aims at fp16's subnormal floor 2^-24 instead of the normal range"),
    _numeric("q18_no_data_parallel", "q18", "4", "32", "data-parallel gpus left out",
             "512 / 16: forgets that 8 GPUs each run a micro-batch per step"),
    _numeric("q20_inverted", "q20", "3x", "0.33x", "wrong way round",
             "inverts the ratio: A's 100 tokens each weigh 3x one of B's 300"),
    _numeric("q24_no_rounding", "q24", "512 B", "40 B", "512 bytes",
             "the tensor's bytes: the caching allocator rounds a block up to 512 bytes"),
    _numeric("q26_zero1", "q26", "48.75 GB", "71.5 GB", "zero-1",
             "ZeRO-1's per-GPU states: stage 2 shards the gradients too"),
    _numeric("q26_zero3", "q26", "48.75 GB", "26 GB", "zero-3",
             "ZeRO-3's per-GPU states: stage 2 keeps the 16-bit parameters whole"),
    _numeric("q31_keys_only", "q31", "16 GiB", "8 GiB", "keys and values",
             "forgets the factor 2: the cache keeps keys and values"),
    _numeric("q31_fp32_cache", "q31", "16 GiB", "32 GiB", "the cache is fp16",
             "4 bytes per value for an fp16 cache"),
    _numeric("q32_query_heads", "q32", "20 GiB", "160 GiB", "key/value heads only",
             "multiplies by the 64 query heads: GQA caches the 8 KV heads"),
    _numeric("q36_fp16_base", "q36", "4.44 GB", "14.55 GB", "4 bits",
             "the frozen base weights in 16 bits: QLoRA stores them in 4"),
    _numeric("q36_no_adapters", "q36", "4.44 GB", "3.37 GB", "adapters' states left out",
             "the 4-bit base only: the adapters' weights, gradients and AdamW moments left out"),
    _numeric("q37_activations_sharded", "q37", "41.5 GB", "14.8 GB", "activations divided",
             "divides the activations by the 16 GPUs: FSDP shards the model states only"),
    Mutant(id="q3_extra_fp16_copy", cell="answer_q3", find='answer_q3 = "b"',
           replace='answer_q3 = "a"', lose=("test_q3",), says="16-bit copy", klass=0,
           why="both conventions count the 16-bit weights: the 2 bytes are the gradients"),
    Mutant(id="q4_gradients_grow", cell="answer_q4", find='answer_q4 = ["d", "e"]',
           replace='answer_q4 = ["b", "d", "e"]', lose=("test_q4",), says="1 wrong", klass=0,
           why="thinks the gradients grow with the batch (one per parameter, whatever the batch)"),
    Mutant(id="q22_batch_first", cell="answer_q22", find='answer_q22 = "c > e > d > a > b"',
           replace='answer_q22 = "b > c > e > d > a"', lose=("test_q22",), says="reversed",
           klass=0, why="reduces the batch first, the last resort of 05"),
    Mutant(id="q9_doubles_step_time", cell="answer_q9",
           find="so a step costs about 30% more time.",
           replace="so checkpointing doubles the step time.", lose=("test_q9",),
           says="doubles the step time", klass=0,
           why="one extra forward of a step of about three forwards is a third more, not twice"),
    Mutant(id="q17_layernorm_too", cell="answer_q17",
           find="'with BatchNorm, which normalizes using micro-batch statistics.'",
           replace="'with BatchNorm and LayerNorm, which normalize using micro-batch statistics.'",
           lose=("test_q17",), says="layernorm", klass=0,
           why="LayerNorm normalises each item on its own: accumulation stays exact with it"),
    Mutant(id="q17_never_says_when", cell="answer_q17",
           find="It breaks when micro-batches have different numbers of real (non-padding) '\n"
                "    'tokens, because then the per-micro-batch mean gives each token a different "
                "weight, and '\n    'with BatchNorm, which normalizes using micro-batch "
                "statistics.",
           replace="", lose=("test_q17",), says="when they are not", klass=0,
           why="answers why they are equal and never when they are not"),
    Mutant(id="q33_quadratic_cache", cell="answer_q33", find="so it grows linearly with",
           replace="so it grows quadratically with", lose=("test_q33",), says="linearly",
           klass=0, why="the KV cache grows linearly with the tokens; attention's compute is "
                        "what is quadratic"),
]
