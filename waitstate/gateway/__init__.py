"""The webhook gateway: verifies resume tokens and delivers completions and decisions to runs,
and takes people's messages to threads.

python -m waitstate.gateway       # serves on GATEWAY_HOST:GATEWAY_PORT, keys from WAITSTATE_TOKEN_KEYS

The HTTP app and the deliverer are imported from `waitstate.gateway.app` and
`waitstate.gateway.delivery`; the tokens it verifies (which workers mint) and the operator keys
it checks are `waitstate.auth`'s.
"""
