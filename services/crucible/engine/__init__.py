"""The serving engine: continuous batching over a paged KV cache.

One `Engine` generates for many requests at once. Every step the `Scheduler` retires the
sequences that finished, admits waiting ones while KV blocks last, and runs one forward
for the new prompts and one for the running sequences' next token. The KV cache is a pool
of fixed-size blocks (`blocks.py`); a sequence holds a table of them, and full prompt
blocks are shared between sequences with the same prefix (the K samples of one prompt
compute it once). Sampling is per request and batch-independent (`sampler.py`), so a
prompt's completion does not depend on which other requests shared its steps.
"""
