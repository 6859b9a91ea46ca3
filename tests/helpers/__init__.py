"""Code shared by the tests, imported as a normal module (`from tests.helpers.tiny import ...`).

- `tiny`: the tiny-run overrides, the random tiny model, and a run-directory copy that keeps hard links;
- `synthetic_run`: a hand-made run directory whose every number is known (sql, report, cli tests);
- `hf_models`: tiny random Llama / Qwen2 models with a BPE tokenizer and a chat template;
- `resume`: the kill -9 / resume checks (integration: the plain loop; e2e: under Prefect);
- `resume_driver.py`, `stats_driver.py`: scripts the tests run in subprocesses (not collected).
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the repository root
RESUME_DRIVER = Path(__file__).resolve().parent / "resume_driver.py"  # run as a script by the tests
