"""The catalogue of agentgym's ids: the bundled environments and the clients of environments held
elsewhere, each by its entry point (data only; :mod:`agentgym.envs.registration` registers them)."""

__all__ = ["CLIENTS", "ENVIRONMENTS"]

# id -> (entry point, one-line description)
ENVIRONMENTS: dict[str, tuple[str, str]] = {
    "agentgym/Refund-v0": ("agentgym.envs.refund.env:RefundEnv", "Customer-support refund workflow under a written policy, with a scripted customer"),
    "agentgym/CodeExec-v0": ("agentgym.envs.code_exec.env:CodeExecEnv", "Write, test and submit Python code in a sandbox; graded by hidden tests"),
    "agentgym/MockAPI-v0": ("agentgym.envs.mock_api.env:MockApiEnv", "Helpdesk operations over a real HTTP API with seeded, reproducible faults"),
    "agentgym/SQL-v0": ("agentgym.envs.knowledge.sql_env:SQLEnv", "Answer questions with read-only SQL over a synthetic world snapshot"),
    "agentgym/SearchQA-v0": (
        "agentgym.envs.knowledge.searchqa_env:SearchQAEnv",
        "Multi-hop question answering with full-text search over a synthetic encyclopedia",
    ),
    "agentgym/ToolMath-v0": (
        "agentgym.envs.knowledge.toolmath_env:ToolMathEnv",
        "Look facts up with search, compute with a safe calculator, answer with stated rounding",
    ),
    "agentgym/TauRetail-v0": (
        "agentgym.envs.tau_retail.env:TauRetailEnv",
        "τ-bench retail: its 16 tools, database, 635 tasks and hash-based reward, with a deterministic customer",
    ),
}


# Clients of environments held elsewhere (``agentgym serve``, a Ray actor pool, an MCP server); not environments of their own.
# id -> (entry point, one-line description)
CLIENTS: dict[str, tuple[str, str]] = {
    "agentgym/Remote-v0": (
        "agentgym.remote.client:RemoteEnv",
        "An environment served by `agentgym serve` on another machine (url=..., env_id=...); see docs/scale.md",
    ),
    "agentgym/Ray-v0": ("agentgym.remote.ray_pool:RayEnv", "An environment in an actor of a Ray pool (env_id=..., pool=...); see docs/scale.md"),
    "agentgym/MCP-v0": (
        "agentgym.bridges.mcp_env:MCPEnv",
        "Any MCP server's tools as an environment (server=..., verifier=..., tasks=...); see docs/bridges.md",
    ),
}
