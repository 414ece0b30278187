"""The checks of what a run's input names: a model spec, a tenant."""

from __future__ import annotations

# Temporal's limit on a fairness key, which a tenant is on the model queue.
TENANT_MAX_BYTES = 64


def check_tenant(tenant: str | None) -> str | None:
    """`tenant`, if it can be a fairness key: not blank, at most 64 bytes (UTF-8).

    Raises:
        ValueError: it cannot; the message says why.
    """
    if tenant is None:
        return None
    if not tenant.strip():
        raise ValueError("a tenant must not be blank (None: no tenant)")
    if len(tenant.encode()) > TENANT_MAX_BYTES:
        raise ValueError(
            f"a tenant is at most {TENANT_MAX_BYTES} bytes (Temporal's fairness keys); "
            f"got {len(tenant.encode())}: {tenant[:80]!r}"
        )
    return tenant


def parse_model_spec(spec: str) -> tuple[str, str]:
    """Split `provider:model` into its parts.

    Raises:
        ValueError: the spec is not of that form, or a part is blank or has spaces around it
            (`anthropic: ` would otherwise reach the provider as a model named " ").
    """
    provider, sep, model = spec.partition(":")
    if not sep or not provider.strip() or not model.strip():
        raise ValueError(
            f"model spec {spec!r} is not provider:model "
            "(e.g. openai:gpt-4.1, anthropic:claude-sonnet-4-5, scripted:demo)"
        )
    if provider != provider.strip() or model != model.strip():
        raise ValueError(f"model spec {spec!r} has spaces around the provider or model name")
    return provider, model
