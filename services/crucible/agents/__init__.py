"""Agent environments: multi-turn episodes where the model may call tools.

`protocol` is the contract an environment meets; `tool_calls` reads the calls a model
writes; `sandbox` runs each call in a process of its own; `episode` plays one episode;
`runner` plays many through the serving engine (or a scripted policy); `records` is what an
episode leaves behind. docs/agents.md describes them together.
"""
