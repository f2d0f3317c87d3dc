"""Names of the topics lagpilot reads and writes: the one place that spells them."""

from __future__ import annotations

CONSUMER_OFFSETS = "__consumer_offsets"
WATERMARKS = "lagpilot.watermarks"
LAG = "lagpilot.lag"
CONTROL = "lagpilot.control"
OUTCOMES = "lagpilot.outcomes"
#: the kill switch's state: the latest signed halt/resume per scope (compacted; schemas/halts.py)
HALTS = "lagpilot.halts"
PRODUCERS = "lagpilot.producers"  # producer_rates from the SDK's producer wrapper
#: SDK workers report their processed positions here every sampling tick (key: group)
PROGRESS = "lagpilot.progress"
#: action requests from people and agents (lagpilot mcp), evaluated by the decide stage
REQUESTS = "lagpilot.requests"

#: lagpilot's own consumer groups start with this; the pipeline ignores their commits
#: (reading our own commits to __consumer_offsets would be a feedback loop).
OWN_GROUP_PREFIX = "lagpilot"
