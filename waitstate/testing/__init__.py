"""Stand-ins for tests, as `temporalio.testing` is for Temporal.

`waitstate.testing.wire_server`: a local model server speaking the OpenAI and Anthropic wire
protocols, for the real SDK clients to talk to (`python -m waitstate.testing.wire_server`);
what it answers (scripted replies, the bodies of each protocol) in
`waitstate.testing.wire_replies`; Anthropic's signed thinking blocks, and the checks of a
request that thinks, in `waitstate.testing.wire_thinking`.
"""
