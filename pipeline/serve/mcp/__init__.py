"""``lagpilot mcp``: lagpilot for agents, over the Model Context Protocol.

Supervisor agents and on-call assistants ask why a stream is slow and request actions
through the same rails as the policy. The server reads only lagpilot's own topics
(``lagpilot.lag``, ``lagpilot.control``, ``lagpilot.outcomes``) and writes only signed
requests (``lagpilot.requests``) and, when an operator key is configured, halts and
resumes (``lagpilot.control``); it never reaches into the pipeline's process.

- ``reading``: the topic readers (``lagpilot status``'s and ``lagpilot control tail``'s);
- ``views``: pure: actions joined with their outcomes, and the explanation of an incident;
- ``requesting``: publish a request, wait (bounded) for its verdict and outcome;
- ``resources``: the runbook, the current policy, the event schemas;
- ``server``: the tools and the command line.
"""
