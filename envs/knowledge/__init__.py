"""Knowledge environments over one frozen snapshot of an invented world: agentgym/SQL-v0,
agentgym/SearchQA-v0 and agentgym/ToolMath-v0 (see ``docs/envs/knowledge.md``)."""
