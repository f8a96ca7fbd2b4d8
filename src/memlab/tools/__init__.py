"""Machine tools: ``python -m memlab.tools.envcheck`` (make env-check) and
``python -m memlab.tools.gpucheck`` (make gpu-check). Layer 4: may import any other layer."""
