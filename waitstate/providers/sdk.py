"""What the adapters over a vendor's SDK share: a client that never retries on its own, and
how a failed call becomes a `ProviderError`.

Each SDK's own types stay in its adapter module; this one sees only plain values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Generic, Protocol, TypeVar

from waitstate.providers.base import (
    Adapter,
    ProviderError,
    no_response_message,
    retry_after_seconds,
)

# What a call whose stream broke off part way got: said in our words, with the transport's reason,
# whether the SDK raised the transport's error as it was or wrapped it in its own (whose wording
# changes between its versions).
CONNECTION_LOST = "Connection lost."


class _Closable(Protocol):
    async def close(self) -> None: ...


ClientT = TypeVar("ClientT", bound=_Closable)


class SdkProvider(Adapter, Generic[ClientT]):
    """An adapter over an SDK's async client, one request per call.

    The caller builds the client with `max_retries=0`: retries belong to Temporal, which
    sees them in the run's history and honours `ProviderError.retry_after`.
    """

    def __init__(self, client: ClientT) -> None:
        self._client = client

    async def aclose(self) -> None:
        """Close the SDK client's connection pool."""
        await self._client.close()

    def _status_error(self, message: str, status: int, headers: Mapping[str, str]) -> ProviderError:
        """The API answered with an error `status`; its `headers` may say when to try again."""
        return ProviderError(
            self.name, message, status=status, retry_after=retry_after_seconds(headers)
        )

    def _no_response(self, message: str, cause: BaseException | None, url: object) -> ProviderError:
        """The call got no answer (see `no_response_message`)."""
        return ProviderError(self.name, no_response_message(message, cause, url))
