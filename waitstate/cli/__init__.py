"""The CLI's commands, by family: one run (`runs`: run, status, watch, list, cancel), following
a run live (`follow`), a thread's conversation (`threads`: chat), people (`people`: pending,
approve, reject, answer), the fleet (`fleet`: ops, cleanup), the replay gate before a deploy
(`replay`: replay-check), the open runs per patch marker and deployment version (`versions`),
and what they print with (`output`: escaping what came from outside, one-line errors).
`starter.py` is the entry point: its parser names every command and where it lives.
"""
