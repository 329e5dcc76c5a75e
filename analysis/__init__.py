"""The analysis library: capture reading and analysis, connection summaries, the alert
engine and its rules, and the export writers. Pure Python without Django and without the
privileged agent, so the CLI, the agent and the webapp can all build on it."""
