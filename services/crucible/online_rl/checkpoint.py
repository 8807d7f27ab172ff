"""An online-RL run's whole state as one DCP `Stateful`, for the run SDK's checkpoints.

Laid out like the offline trainer's (`training/train.py` `TrainerState`): the model and the
optimizer through torch.distributed.checkpoint.state_dict, which keys optimizer state by
parameter name and materialises a fresh optimizer's, so DCP has tensors to load into; the
KL reference's weights when the run keeps one; the rest (`OnlineRL.progress()`: version,
round, buffer) as one JSON string. Saved under the trainer's key, its `model` entry is what
`model_only` names: evals, rollouts and `crucible serve` load an online run's checkpoint
like any trainer's.
"""

import json
from typing import Any

from crucible.online_rl.loop import OnlineRL


class OnlineState:
    def __init__(self, online: OnlineRL) -> None:
        self.online = online

    def state_dict(self) -> dict[str, Any]:
        # Imported here: torch.distributed.checkpoint costs seconds to import.
        from torch.distributed.checkpoint.state_dict import get_state_dict

        learner = self.online.learner
        fresh = not learner.optimizer.state
        model_state, optimizer_state = get_state_dict(learner.model, learner.optimizer)
        if fresh:
            # get_state_dict materialises a fresh optimizer's state with a zero-lr step;
            # forget it again so that a save before the first update changes nothing
            # (AdamW's step count feeds its bias correction).
            learner.optimizer.state.clear()
        progress = {"online": self.online.progress(), "optimizer_fresh": fresh}
        state: dict[str, Any] = {
            "model": model_state,
            "optimizer": optimizer_state,
            "progress": json.dumps(progress),
        }
        if learner.reference is not None:
            state["reference"] = learner.reference.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import set_state_dict

        learner = self.online.learner
        set_state_dict(
            learner.model,
            learner.optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optimizer"],
        )
        if learner.reference is not None:
            learner.reference.load_state_dict(state["reference"])
        progress = json.loads(state["progress"])
        if progress["optimizer_fresh"]:
            learner.optimizer.state.clear()
        self.online.load_progress(progress["online"])
