"""The Beam side of deployed agents (metrics.agents.deployed) that both kinds of case share: fixed
turns (transforms.inference) and simulated conversations (transforms.simulator) are checkpointed
as they finish, under one folder, and call with the config's credentials (their names only)."""
from __future__ import annotations

from evalbeam.metrics.agents.deployed import encode_result
from evalbeam.metrics.agents.inference import USAGE_METRIC
from evalbeam.metrics.judge.client import JudgeResponse

CHECKPOINTS = "inference"  # deployed agents' finished cases, a subfolder of the run's checkpoint folder


class CheckpointedInferrer:
    """A deployed agent's inferrer whose finished cases (fixed turns, or simulated conversations) go to the
    checkpoint writer as they finish."""

    def __init__(self, inner, keys: dict, writer):
        self._inner, self._keys, self._writer = inner, keys, writer

    async def infer(self, fields):
        if self._writer is not None:
            # a full disk met by a checkpoint: the agent is asked no more; the run ends (DeployedInferFn)
            self._writer.check()
        result = await self._inner.infer(fields)
        key = self._keys.get(id(fields))
        if key is not None and self._writer is not None:
            self._writer.add(JudgeResponse(key=key, metric=USAGE_METRIC, verdict=encode_result(result)))
        return result

    async def conversation(self, fields):
        """A simulated conversation (transforms.simulator): asked only while the checkpoints can be written."""
        if self._writer is not None:
            self._writer.check()
        return await self._inner.conversation(fields)

    def finished(self, fields, result) -> None:
        """A simulated conversation that ended (metrics.agents.inference.infer_all): checkpointed as a finished case."""
        key = self._keys.get(id(fields))
        if key is not None and self._writer is not None:
            self._writer.add(JudgeResponse(key=key, metric=USAGE_METRIC, verdict=encode_result(result)))

    async def close(self):
        await self._inner.close()


def deployed_auth(inference) -> dict | None:
    """inference.auth as plain data for metrics.agents.auth (the names of its variables, never their values)."""
    return inference.auth.plain() if inference.auth is not None else None
