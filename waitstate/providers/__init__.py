"""Model adapters behind one protocol, and the registry that resolves `provider:model` specs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from waitstate.providers.base import (
    LaterModelError,
    NamedModels,
    Provider,
    ProviderError,
    UnknownModelError,
    parse_model_spec,
)

__all__ = [
    "LaterModelError",
    "Provider",
    "ProviderError",
    "Providers",
    "UnknownModelError",
    "parse_model_spec",
]


class Providers:
    """Resolves model specs to providers, creating each provider once, on first use.

    Lazy creation lets a worker without an OpenAI key still run Anthropic and scripted runs.
    """

    def __init__(self, factories: Mapping[str, Callable[[], Provider]]) -> None:
        self._factories = dict(factories)
        self._created: dict[str, Provider] = {}

    def names(self) -> list[str]:
        """Provider names this registry knows."""
        return sorted(self._factories)

    def resolve(self, spec: str, *, later: Sequence[str] = ()) -> tuple[Provider, str]:
        """The provider and model name of a spec like `openai:gpt-4.1`, once each spec of
        `later` (the models the caller would go on with) is checked too (`check`).

        Raises:
            UnknownModelError: malformed spec, unknown provider, or a provider that cannot be
                created (e.g. its API key is not set).
            LaterModelError: the same, of a spec of `later`.
        """
        try:
            name, model = parse_model_spec(spec)
        except ValueError as err:
            raise UnknownModelError(str(err)) from err
        if name not in self._created:
            factory = self._factories.get(name)
            if factory is None:
                raise UnknownModelError(
                    f"unknown provider {name!r} in {spec!r}; known: {', '.join(self.names())}"
                )
            self._created[name] = factory()
        for other in later:
            try:
                self.check(other)
            except UnknownModelError as err:
                raise LaterModelError(f"{other!r} cannot be called on this worker: {err}") from None
        return self._created[name], model

    def check(self, spec: str) -> None:
        """Whether a call of `spec` could be made: its provider resolves (see `resolve`) and,
        if it knows its models (`NamedModels`), has that one.

        Raises:
            UnknownModelError: it could not, saying why.
        """
        provider, model = self.resolve(spec)
        if isinstance(provider, NamedModels):
            provider.check_model(model)

    async def aclose(self) -> None:
        """Close every provider created so far."""
        created, self._created = list(self._created.values()), {}
        for provider in created:
            await provider.aclose()
