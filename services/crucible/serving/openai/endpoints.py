"""What the /v1 routes do: check an OpenAI request, turn it into engine requests, and answer
with the whole response or stream it chunk by chunk.

Bad input is a 400 in OpenAI's error shape with `param` naming the field, never a 500: a
request asking for more than the server's `ServeLimits` is refused before its prompts are
tokenized, and `AsyncEngine.check` refuses a prompt or parameters the engine could never
run before any of the request's prompts is started.
"""

import contextlib
import time
import uuid
from collections.abc import AsyncGenerator
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from jinja2 import TemplateError

from crucible.config.engine import ServeLimits
from crucible.config.sampling import InvalidParameter, SamplingParams
from crucible.engine.async_engine import AsyncEngine, EngineStopped
from crucible.models.chat import encode_chat_prompt
from crucible.models.tokenizer import Tokenizer
from crucible.serving.openai.delivery import (
    CLIENT_CLOSED_REQUEST,
    event_stream,
    json_response,
    unless_client_leaves,
)
from crucible.serving.openai.errors import ApiError
from crucible.serving.openai.generation import Generation
from crucible.serving.openai.logprobs import LogprobFormatter
from crucible.serving.openai.metrics import EngineMetrics
from crucible.serving.openai.protocol import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatDelta,
    ChatResponseMessage,
    CompletionChoice,
    CompletionRequest,
    CompletionResponse,
    ModelCard,
    ModelList,
    chat_error,
    chat_sampling_params,
    check_bounds,
    completion_sampling_params,
)


class Endpoints:
    """The routes' work, with the engine, the tokenizer and the metrics they share."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        model_name: str,
        tokenizer: Tokenizer,
        metrics: EngineMetrics,
        model_root: str | None = None,
        limits: ServeLimits = ServeLimits(),
    ) -> None:
        self.engine = engine
        self.limits = limits
        self.model_name = model_name
        self.model_root = model_root
        self.tokenizer = tokenizer
        self.metrics = metrics
        self.logprobs = LogprobFormatter(tokenizer)
        self.created = int(time.time())

    def models(self) -> ModelList:
        card = ModelCard(
            id=self.model_name,
            created=self.created,
            owned_by="crucible",
            max_model_len=self.engine.max_sequence_tokens,
            root=self.model_root,
        )
        return ModelList(data=[card])

    async def completions(self, request: CompletionRequest, http: Request) -> Response:
        self._check_model(request.model)
        check_bounds(request, self.limits)
        params = completion_sampling_params(request)
        prompts = self._completion_prompts(request.prompt)
        for prompt in prompts:
            self.engine.check(prompt, params)
        generation = self._start(prompts, params)
        head: dict[str, Any] = {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "created": int(time.time()),
            "model": self.model_name,
        }
        if request.stream:
            return event_stream(self._completion_chunks(request, generation, head))
        if not await unless_client_leaves(http, generation.run()):
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        choices = [
            CompletionChoice(
                index=choice.index,
                text=choice.text(self.tokenizer),
                logprobs=self.logprobs.completion(choice.logprobs, 0)
                if request.logprobs is not None
                else None,
                finish_reason=choice.finish_reason,
                token_ids=choice.tokens if request.return_token_ids else None,
                prompt_token_ids=choice.prompt if request.return_token_ids else None,
            )
            for choice in generation.choices
        ]
        return json_response(CompletionResponse(**head, choices=choices, usage=generation.usage))

    async def chat(self, request: ChatCompletionRequest, http: Request) -> Response:
        self._check_model(request.model)
        check_bounds(request, self.limits)
        try:
            prompt = encode_chat_prompt(self.tokenizer, request.template_messages())
        except (ValueError, TemplateError) as exc:
            raise InvalidParameter("messages", f"cannot be rendered as a chat: {exc}") from None
        capacity = self.engine.max_sequence_tokens
        room = capacity - len(prompt)
        if room < 1:
            raise InvalidParameter(
                "messages",
                f"the conversation's {len(prompt)} tokens leave no room for a reply in the "
                f"model's context of {capacity} tokens",
            )
        params = chat_sampling_params(request, room=room)
        try:
            self.engine.check(prompt, params)
        except InvalidParameter as exc:
            raise chat_error(request, exc) from None
        generation = self._start([prompt], params)
        head: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "created": int(time.time()),
            "model": self.model_name,
        }
        if request.stream:
            return event_stream(self._chat_chunks(request, generation, head))
        if not await unless_client_leaves(http, generation.run()):
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        choices = [
            ChatChoice(
                index=choice.index,
                message=ChatResponseMessage(content=choice.text(self.tokenizer)),
                logprobs=self.logprobs.chat(choice.logprobs) if request.logprobs else None,
                finish_reason=choice.finish_reason,
                token_ids=choice.tokens if request.return_token_ids else None,
            )
            for choice in generation.choices
        ]
        return json_response(
            ChatCompletionResponse(
                **head,
                choices=choices,
                usage=generation.usage,
                prompt_token_ids=prompt if request.return_token_ids else None,
            )
        )

    def _check_model(self, model: str) -> None:
        if model != self.model_name:
            raise ApiError(
                404,
                f"the model {model!r} does not exist; this server serves {self.model_name!r}",
                param="model",
                code="model_not_found",
            )

    def _completion_prompts(self, prompt: str | list[str] | list[int]) -> list[list[int]]:
        if isinstance(prompt, str):
            texts = [prompt]
        elif all(isinstance(p, str) for p in prompt):
            texts = [str(p) for p in prompt]
        else:
            # Token ids as they are; the engine's check refuses one outside the vocabulary.
            return [[int(p) for p in prompt]]
        if not texts:
            raise InvalidParameter("prompt", "is an empty list; send a text or token ids")
        # BOS first, as the workloads' rollouts encode prompts, so a text prompt here is the
        # same tokens it is in training and evaluation.
        return [self.tokenizer.encode(text, bos=True) for text in texts]

    def _start(self, prompts: list[list[int]], params: SamplingParams) -> Generation:
        if not self.engine.healthy:
            raise EngineStopped("the engine is not running")
        return Generation(self.engine, prompts, params, self.metrics.timer())

    # -- streams ---------------------------------------------------------------------------

    async def _completion_chunks(
        self, request: CompletionRequest, generation: Generation, head: dict[str, Any]
    ) -> AsyncGenerator[str, None]:
        async with contextlib.aclosing(generation.updates()) as updates:
            async for choice in updates:
                taken = choice.take(self.tokenizer, generation.params.stop)
                if taken is None:
                    continue
                text, start = taken
                chunk = CompletionChoice(
                    index=choice.index,
                    text=text,
                    logprobs=self.logprobs.completion(choice.logprobs, start)
                    if request.logprobs is not None
                    else None,
                    finish_reason=choice.finish_reason,
                    token_ids=choice.tokens[start:] if request.return_token_ids else None,
                    prompt_token_ids=choice.prompt
                    if request.return_token_ids and start == 0
                    else None,
                )
                yield CompletionResponse(**head, choices=[chunk]).model_dump_json()
        if request.include_usage:
            usage = CompletionResponse(**head, choices=[], usage=generation.usage)
            yield usage.model_dump_json()

    async def _chat_chunks(
        self, request: ChatCompletionRequest, generation: Generation, head: dict[str, Any]
    ) -> AsyncGenerator[str, None]:
        for choice in generation.choices:
            opening = ChatChunkChoice(index=choice.index, delta=ChatDelta(role="assistant"))
            yield ChatCompletionChunk(
                **head,
                choices=[opening],
                prompt_token_ids=choice.prompt
                if request.return_token_ids and choice.index == 0
                else None,
            ).model_dump_json()
        async with contextlib.aclosing(generation.updates()) as updates:
            async for choice in updates:
                taken = choice.take(self.tokenizer, generation.params.stop)
                if taken is None:
                    continue
                text, start = taken
                chunk = ChatChunkChoice(
                    index=choice.index,
                    delta=ChatDelta(content=text or None),
                    logprobs=self.logprobs.chat(choice.logprobs[start:])
                    if request.logprobs
                    else None,
                    finish_reason=choice.finish_reason,
                    token_ids=choice.tokens[start:] if request.return_token_ids else None,
                )
                yield ChatCompletionChunk(**head, choices=[chunk]).model_dump_json()
        if request.include_usage:
            usage = ChatCompletionChunk(**head, choices=[], usage=generation.usage)
            yield usage.model_dump_json()
