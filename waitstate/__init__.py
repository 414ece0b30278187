"""waitstate: a durable runtime for AI agents whose tools run for minutes, hours or days.

`waitstate.client` starts, reads, decides and cancels runs (`WaitstateClient`), for the CLI and
for any program; `waitstate.converter` is the data converter every client and worker uses;
`waitstate.testing` holds stand-ins for tests (a model server speaking the providers' wire
protocols).
"""
