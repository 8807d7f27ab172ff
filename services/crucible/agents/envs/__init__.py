"""The reference agent environments: `calculator` (an answer that needs a tool), `guessing`
(a game of several turns with feedback) and `letter_or_digit` (one turn, the learning test
of online RL), loaded by import path like a team's own (`loading.AGENT_ENVIRONMENT`)."""
