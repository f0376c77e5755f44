"""The audit log: one door for every recorded change, whichever app makes it.

`services.audit()` writes an `AuditEvent` (who, what, before, after, why) and, after commit,
sends `signals.change_committed` for events about a pipeline or a node (the live pages'
chart markers, the planner's checks). Below the domain apps: accounts, nodes, pipelines and
the planner all write through it; it imports none of them (its foreign keys are by name).
"""
