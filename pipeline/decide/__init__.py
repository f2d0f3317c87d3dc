"""Stage 3, decide: from lag events to signed action events on ``lagpilot.control``.

Pure rules with ``now`` passed in: ``policy`` (the numbered per-partition rules),
``policy_config`` (the policy TOML), ``diagnosis`` (the cause of an incident), ``ladder``
and ``remedies`` (remedy ladders, verification); ``policy_op`` is the stateful operator,
``control`` the control topic's edge (publishing signed actions; the kill-switch command is
``pipeline.commands.control``).
"""
