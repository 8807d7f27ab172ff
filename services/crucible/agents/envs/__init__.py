"""The reference agent environments: `calculator` (an answer that needs a tool) and
`guessing` (a game of several turns with feedback), loaded by import path like a team's
own (`loading.AGENT_ENVIRONMENT`)."""
