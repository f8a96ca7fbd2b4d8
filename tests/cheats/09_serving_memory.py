"""Cheats and plausible mistakes the tests of 09_serving_memory must reject (loaded by
tests/notebooks/test_nbgrader_pipeline.py).

Each entry is a student whose submission is the released notebook with one answer cell
replaced; ``expect`` gives the points each test cell must award it.
"""

VARIANTS = {
    # No cache at all: recompute the whole sequence inside the "cached" call (right tokens,
    # but every step feeds the whole sequence).
    "no_real_cache": dict(notebook="09_serving_memory", grade_id="attention_with_cache", expect={
        "test_attention_with_cache": 0, "test_attention_with_cache_hidden": 0}, source='''
def attention_with_cache(block, x, cache):
    return block.attention(x), None
'''),
    # The causal mask of the whole sequence applied to the new positions (triu(1)): at decode
    # the single new query is masked from every earlier key.
    "wrong_mask": dict(notebook="09_serving_memory", grade_id="attention_with_cache", expect={
        "test_attention_with_cache": 0, "test_attention_with_cache_hidden": 0}, source='''
def attention_with_cache(block, x, cache):
    s, b, h = x.shape
    a, d = block.a, h // block.a
    q, k, v = block.qkv(x).split(h, dim=-1)
    q, k, v = (t.reshape(s, b, a, d).permute(1, 2, 0, 3) for t in (q, k, v))
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    t = k.shape[2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)
    future = torch.ones(s, t, dtype=torch.bool, device=x.device).triu(1)
    probs = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    return block.proj((probs @ v).permute(2, 0, 1, 3).reshape(s, b, h)), (k, v)
'''),
    # Forgets the factor 2 (keys only).
    "keys_only": dict(notebook="09_serving_memory", grade_id="kv_cache_bytes", expect={
        "test_kv_cache_bytes": 0, "test_kv_cache_bytes_hidden": 0}, source='''
def kv_cache_bytes(layers, kv_heads, head_dim, seq, batch, dtype):
    return layers * kv_heads * head_dim * seq * batch * torch.empty((), dtype=dtype).element_size()
'''),
    # Returns a float: right value, wrong type.
    "float_batch": dict(notebook="09_serving_memory", grade_id="max_batch", expect={
        "test_max_batch": 0, "test_max_batch_hidden": 0}, source='''
def max_batch(budget_bytes, cfg, context, weight_bytes=2, kv_bytes=2, act_bytes_per_seq=0):
    per_seq = 2 * cfg["layers"] * cfg["kv_heads"] * cfg["head_dim"] * context * kv_bytes + act_bytes_per_seq
    return float(max(0, (budget_bytes - cfg["params"] * weight_bytes) // per_seq))
'''),
    # Forgets the activations: passes the Llama arithmetic, fails the re-measured decoder.
    "no_activations": dict(notebook="09_serving_memory", grade_id="max_batch", expect={
        "test_max_batch": 0, "test_max_batch_hidden": 0}, source='''
def max_batch(budget_bytes, cfg, context, weight_bytes=2, kv_bytes=2, act_bytes_per_seq=0):
    free = budget_bytes - cfg["params"] * weight_bytes
    per_seq = 2 * cfg["layers"] * cfg["kv_heads"] * cfg["head_dim"] * context * kv_bytes
    return int(free // per_seq) if free > 0 else 0
'''),
}
