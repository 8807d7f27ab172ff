"""Online RL: rounds of generate -> train -> update the generators' weights, with the learner,
the buffer, generator processes and pools, policy versions and RL health."""
