"""`crucible demo`: the post-training loop (teacher data -> SFT -> rollouts -> RL, every
checkpoint evaluated) as run specs, and the terminal view that follows it."""
