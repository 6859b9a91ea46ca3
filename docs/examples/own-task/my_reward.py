"""An example reward function (verl's custom reward signature), used by config.yaml beside it.

Full credit when the last \\boxed{} holds the reference answer (compared as numbers when both are
numbers), a small format credit for a boxed answer that is wrong, None when there is no box at all
(the verifier records status `no_answer`).
"""

import re


def boxed_match(data_source: str, solution_str: str, ground_truth: str, extra_info: dict):
    found = re.findall(r"\\boxed\{([^{}]*)\}", solution_str)
    if not found:
        return None
    answer = found[-1].strip()
    try:
        correct = float(answer) == float(ground_truth)
    except ValueError:
        correct = answer == ground_truth.strip()
    return {"score": 1.0 if correct else 0.1, "answer": answer}
