"""An OpenAI-compatible HTTP API over `AsyncEngine`: /v1/completions, /v1/chat/completions
and /v1/models behind API keys, and the open /health and /metrics (probes and scrapers).

The routes are thin: what they do is `openai_endpoints.py`; the per-request state that turns
the engine's tokens into choices is `generation.py`; errors take OpenAI's shape in
`openai_errors.py`. Keys are checked by `api_keys.py` from the headers alone, and bodies
bounded, in `request_gate.py` before FastAPI reads them; what a request may ask for is
bounded by `ServeLimits`. A client that goes away mid-request aborts it, which frees its KV
blocks (`delivery.py`).
"""

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Sequence

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from crucible.config.engine import ServeLimits
from crucible.engine.async_engine import AsyncEngine
from crucible.models.tokenizer import Tokenizer
from crucible.serving.openai.api_keys import TokenCheck, api_key_check
from crucible.serving.openai.endpoints import Endpoints
from crucible.serving.openai.errors import install_error_handlers
from crucible.serving.openai.metrics import EngineMetrics
from crucible.serving.openai.protocol import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionRequest,
    CompletionResponse,
    ErrorResponse,
    ModelList,
)
from crucible.serving.openai.request_gate import RequestGate


def create_engine_app(
    engine: AsyncEngine,
    *,
    model_name: str,
    tokenizer: Tokenizer,
    api_keys: Sequence[str] = (),
    token_check: TokenCheck | None = None,
    model_root: str | None = None,
    limits: ServeLimits = ServeLimits(),
) -> FastAPI:
    """The API over `engine`, which the app starts when it starts serving and stops at
    shutdown. Clients send one of `api_keys`, or a token `token_check` allows;
    `model_root` is what /v1/models says the model is loaded from; `limits` bound what one
    request may ask for."""
    check_key = api_key_check(api_keys, token_check)
    engine_metrics = EngineMetrics(engine)
    endpoints = Endpoints(
        engine,
        model_name=model_name,
        tokenizer=tokenizer,
        metrics=engine_metrics,
        model_root=model_root,
        limits=limits,
    )

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncGenerator[None, None]:
        engine.start()
        try:
            yield
        finally:
            # stop() joins the engine thread, which may be mid-step: wait off the loop.
            await asyncio.to_thread(engine.stop)

    app = FastAPI(
        title="Crucible engine", summary="OpenAI-compatible completions", lifespan=lifespan
    )
    install_error_handlers(app)
    app.add_middleware(RequestGate, check_key=check_key, max_body_bytes=limits.max_body_bytes)

    v1 = APIRouter(prefix="/v1")  # every route behind the gate's key check

    @v1.post(
        "/completions",
        operation_id="createCompletion",
        responses={200: {"model": CompletionResponse}, 400: {"model": ErrorResponse}},
    )
    async def completions(body: CompletionRequest, http: Request) -> Response:
        return await endpoints.completions(body, http)

    @v1.post(
        "/chat/completions",
        operation_id="createChatCompletion",
        responses={200: {"model": ChatCompletionResponse}, 400: {"model": ErrorResponse}},
    )
    async def chat_completions(body: ChatCompletionRequest, http: Request) -> Response:
        return await endpoints.chat(body, http)

    @v1.get("/models", operation_id="listModels")
    async def models() -> ModelList:
        return endpoints.models()

    app.include_router(v1)

    @app.get("/health", operation_id="health")
    async def health() -> JSONResponse:
        if engine.healthy:
            return JSONResponse({"status": "ok"})
        return JSONResponse({"status": "unavailable"}, status_code=503)

    @app.get("/metrics", operation_id="prometheusMetrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(engine_metrics.render(), media_type=CONTENT_TYPE_LATEST)

    return app
