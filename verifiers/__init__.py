"""Verifiable rewards: every verifier returns a :class:`RewardResult` that explains its score.

- answers: :func:`exact_match`, :func:`normalized_match`, :func:`numeric_match`,
  :func:`math_match` (after :class:`AnswerExtractor` finds the final answer);
- math: :func:`math_equivalent`, bounded in time in any thread, batched in worker processes;
- structure: :func:`validate_json`, :func:`validate_tool_call`, :func:`format_reward`;
- shaping: :func:`tool_use_reward`, length penalties, :class:`ProcessReward` per turn;
- composition: :func:`weighted_sum` and :class:`Composite`, with a hard gate.

See ``docs/rewards.md``.
"""

from agentgym.verifiers.bounded import BoundedPool, Outcome
from agentgym.verifiers.compose import Composite, weighted_sum
from agentgym.verifiers.extract import AnswerExtractor, Extraction, extract_boxed, extract_final_answer, extract_regex, extract_tagged
from agentgym.verifiers.length import linear_length_penalty, overlong_penalty, sigmoid_length_penalty
from agentgym.verifiers.match import DEFAULT_EXTRACTOR, exact_match, math_match, math_match_batch, normalized_match, numeric_match
from agentgym.verifiers.math_equiv import MathCheck, MathEquivalence, check_math_equivalence, math_equivalent, math_equivalent_batch
from agentgym.verifiers.normalize import NumberParseError, ParsedNumber, normalize_text, parse_number
from agentgym.verifiers.process import ProcessReward
from agentgym.verifiers.result import RewardResult
from agentgym.verifiers.schema import tool_schemas, validate_json, validate_json_text, validate_tool_call
from agentgym.verifiers.tool_format import episode_format_reward, format_reward
from agentgym.verifiers.tool_use import execution_reward, tool_use_reward
from agentgym.verifiers.trajectory import Turn, split_turns, tool_calls_of

__all__ = [
    "DEFAULT_EXTRACTOR",
    "AnswerExtractor",
    "BoundedPool",
    "Composite",
    "Extraction",
    "MathCheck",
    "MathEquivalence",
    "NumberParseError",
    "Outcome",
    "ParsedNumber",
    "ProcessReward",
    "RewardResult",
    "Turn",
    "check_math_equivalence",
    "episode_format_reward",
    "exact_match",
    "execution_reward",
    "extract_boxed",
    "extract_final_answer",
    "extract_regex",
    "extract_tagged",
    "format_reward",
    "linear_length_penalty",
    "math_equivalent",
    "math_equivalent_batch",
    "math_match",
    "math_match_batch",
    "normalize_text",
    "normalized_match",
    "numeric_match",
    "overlong_penalty",
    "parse_number",
    "sigmoid_length_penalty",
    "split_turns",
    "tool_calls_of",
    "tool_schemas",
    "tool_use_reward",
    "validate_json",
    "validate_json_text",
    "validate_tool_call",
    "weighted_sum",
]
