"""a24, written by the round's helper as a 9 MB patch; stored as the script that writes the
same patch (test_hostile_blind.py runs ``patch()`` where no JSON is):
pathological markdown after the release's cells: 30,000 nested quotes, a list 3,000 levels
deep, 20,000 unbalanced emphasis and link openers."""

RELEASE = ["intro", "setup", "inference-intro", "inference-measure", "inference-read", "attention_with_cache", "test_attention_with_cache", "test_attention_with_cache_hidden", "cache-measure", "formula-intro", "kv_cache_bytes", "test_kv_cache_bytes", "test_kv_cache_bytes_hidden", "gqa-intro", "gqa-measure", "capacity-intro", "max_batch", "test_max_batch", "test_max_batch_hidden", "capacity-table", "you-can-now", "exercises"]


def patch() -> dict:
    cells = [{"release": gid} for gid in RELEASE]
    for source in (">" * 30_000 + " deep\n",
                   "".join("  " * k + "- x\n" for k in range(3_000)),
                   "*" * 20_000 + "a" + "_" * 20_000 + "[" * 20_000 + "](" * 20_000 + "\n"):
        cells.append({"cell_type": "markdown", "metadata": {}, "source": source})
    return {"cells": cells}
