"""The OpenAI-compatible HTTP API `crucible serve` runs over the engine: /v1/completions,
/v1/chat/completions, /v1/models, its auth, errors, logprobs and delivery."""
