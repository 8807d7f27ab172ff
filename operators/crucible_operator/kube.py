"""The operator's Kubernetes client: lightkube's, with a bound on requests in flight.

httpx's connection pool does bookkeeping over every queued request and every connection
each time a request starts or ends. With 500 reconcile loops creating and patching pods in
one burst, hundreds of requests queued in it and that bookkeeping took a large share of
the operator's event loop (the profile is in benchmarks/README.md, scheduling vs Kubeflow).
Waiting
on a semaphore instead costs nothing per waiter, and a few requests in flight keep the
apiserver as busy as hundreds do.
"""

import asyncio
from typing import Any

from lightkube import AsyncClient

IN_FLIGHT = 16


class BoundedKube:
    def __init__(self, client: AsyncClient, in_flight: int = IN_FLIGHT) -> None:
        self.client = client
        self._gate = asyncio.Semaphore(in_flight)

    async def create(self, *args: Any, **kwargs: Any) -> Any:
        async with self._gate:
            return await self.client.create(*args, **kwargs)

    async def get(self, *args: Any, **kwargs: Any) -> Any:
        async with self._gate:
            return await self.client.get(*args, **kwargs)

    async def patch(self, *args: Any, **kwargs: Any) -> Any:
        async with self._gate:
            return await self.client.patch(*args, **kwargs)

    async def apply(self, *args: Any, **kwargs: Any) -> Any:
        async with self._gate:
            return await self.client.apply(*args, **kwargs)

    async def delete(self, *args: Any, **kwargs: Any) -> Any:
        async with self._gate:
            return await self.client.delete(*args, **kwargs)

    async def close(self) -> None:
        await self.client.close()
