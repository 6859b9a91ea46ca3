"""The in-memory form of one data-set row: a chat prompt, its ground truth, and where it came from.

Every task builder writes verl-schema Parquet (`sources.py`, `countdown_data.py`, ...); `dataset_file.py`
reads any such file back into these objects, which the stages, the verifier and the evaluation share.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Message", "Prompt"]


@dataclass(frozen=True)
class Message:
    role: str
    content: str


@dataclass(frozen=True)
class Prompt:
    """One RL prompt.

    prompt_id:    stable id, '<split>-<index>' from extra_info, else '<file stem>-<row>'
    messages:     the chat prompt (use `chat()` for the list-of-dicts chat templates expect)
    ground_truth: reward_model.ground_truth (the answer text the verifier compares with)
    data_source:  e.g. 'chain_sum'; selects reasoning-gym's checker for that backend
    rg_entry:     the reasoning-gym entry as JSON, or None for rows not made by reasoning-gym
    target:       a worked solution, or None
    """

    prompt_id: str
    messages: tuple[Message, ...]
    ground_truth: str
    data_source: str
    rg_entry: str | None = None
    target: str | None = None

    def chat(self) -> list[dict[str, str]]:
        return [{"role": m.role, "content": m.content} for m in self.messages]

    @property
    def user_text(self) -> str:
        """Content of the last user message (the question, for single-turn prompts)."""
        for m in reversed(self.messages):
            if m.role == "user":
                return m.content
        raise ValueError(f"prompt {self.prompt_id} has no user message")
