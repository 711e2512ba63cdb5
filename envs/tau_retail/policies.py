"""The oracle of TauRetail-v0: τ-bench's ground-truth actions, then the required outputs.

It produces the SFT demonstrations of the train split. It authenticates the customer first (by
email) when the ground truth does not (τ-bench's train and dev ground truths never do; the policy
demands it). With a customer to talk to (scripted or LLM) it asks for a confirmation, naming every
detail, before each write (the policy demands an explicit yes); a ticket has no one to ask, so there
it only calls the tools.
"""

from __future__ import annotations

from typing import Any

from agentgym.envs.tau_retail.data import RetailDB
from agentgym.envs.tau_retail.tools import WRITE_TOOLS
from agentgym.envs.tau_retail.users import describe
from agentgym.envs.tau_retail.violations import AUTHENTICATION_TOOLS, record_owner
from agentgym.parsing import format_tool_call
from agentgym.policies import Script, ScriptedPolicy


class OraclePolicy(ScriptedPolicy):
    """Plays the task's ground-truth actions one call a turn, then states the required outputs."""

    def script(self, env: Any) -> Script:
        task = env.task
        before = RetailDB()  # writes are described from the data as it was, as the customer knows it
        first_record = next((a for a in task["actions"] if a["name"] in AUTHENTICATION_TOOLS or record_owner(before, a["kwargs"])), None)
        if first_record is not None and first_record["name"] not in AUTHENTICATION_TOOLS:
            yield format_tool_call("find_user_id_by_email", {"email": before.users[task["user_id"]]["email"]})
        for action in task["actions"]:
            if env.user_mode != "ticket" and action["name"] in WRITE_TOOLS:
                yield f"To confirm, I will {describe(before, action)}. Shall I proceed (yes/no)?"
            yield format_tool_call(action["name"], action["kwargs"])
        if task["outputs"]:
            yield "Here is what you asked for: " + "; ".join(task["outputs"]) + "."
        else:
            yield "Your request has been taken care of. Is there anything else I can help with?"
