"""What `ts` prints around Prefect, without a run: telemetry off in `ts` itself, task runs' INFO lines off
the console unless --verbose, Prefect's log lines above a live progress bar (never on its line), and the
legend under `ts eval`'s seeded row."""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys

import pytest
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from thinking_seeds.flows.cli.output import OutputFormat


def _env_without(name: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != name}
    return env | extra


@pytest.mark.parametrize(("user", "want"), [(None, "false"), ("true", "true")])
def test_ts_turns_prefect_telemetry_off_before_prefect_loads_unless_the_user_set_it(user, want):
    name = "PREFECT_SERVER_ANALYTICS_ENABLED"
    env = _env_without(name, **({name: user} if user else {}))
    code = f"import os, sys; import thinking_seeds.flows.cli; print(os.environ.get('{name}'), 'prefect' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [want, "False"]  # set by the CLI's import, and Prefect not loaded yet


def _records():
    def rec(name: str, level: int, msg: str) -> logging.LogRecord:
        return logging.LogRecord(name, level, __file__, 1, msg, None, None)

    return [
        rec("prefect.task_runs", logging.INFO, "Finished in state Completed()"),
        rec("prefect.task_runs", logging.WARNING, "retrying"),
        rec("prefect.flow_runs", logging.INFO, "iteration 0: reward/mean 0.5"),
        # what a stage prints (the flow's log_prints makes it a task-run INFO record): it must show
        rec("prefect.task_runs", logging.INFO, "evaluate θ_0 (validation): 128/1024 samples (12%), 1.9 s"),
    ]


def test_task_run_info_lines_stay_off_the_console_unless_verbose():
    pytest.importorskip("prefect")
    import prefect.main  # noqa: F401 - Prefect's logging configuration: its console handlers

    from thinking_seeds.flows.prefect_logs import prefect_console_handlers, quiet_task_runs

    handlers = prefect_console_handlers()
    assert handlers
    try:
        quiet_task_runs(verbose=False)
        quiet_task_runs(verbose=False)  # idempotent: one filter per handler
        for h in handlers:
            passed = [r.getMessage() for r in _records() if h.filter(r)]
            assert passed == ["retrying", "iteration 0: reward/mean 0.5", _records()[-1].getMessage()]
            assert sum(type(f).__name__ == "TaskRunChatter" for f in h.filters) == 1
        quiet_task_runs(verbose=True)  # --verbose: every record, as Prefect prints them
        for h in handlers:
            assert [r.getMessage() for r in _records() if h.filter(r)] == [r.getMessage() for r in _records()]
    finally:
        quiet_task_runs(verbose=True)


def _segments(raw: str) -> list[str]:
    """What a terminal shows as separate lines: split at newlines and carriage returns, escape codes out."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", raw)  # colours: the same line
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "\n", text)  # cursor moves and erasures: another line
    return [s for s in re.split(r"[\r\n]", text) if s.strip()]


def _bar_and_a_log_line(shared: bool) -> list[str]:
    """A live progress bar on a terminal and a Prefect log line printed while it is up."""
    pytest.importorskip("prefect")
    from prefect.logging.handlers import PrefectConsoleHandler

    from thinking_seeds.flows.prefect_logs import prefect_console

    term = io.StringIO()
    handler = PrefectConsoleHandler(stream=term)
    handler.console = Console(file=term, force_terminal=True, width=120)  # Prefect's own, on the same tty
    logger = logging.getLogger("test.prefect_logs.bar")
    logger.propagate, logger.handlers = False, [handler]
    logger.setLevel(logging.INFO)
    bar_console = Console(file=term, force_terminal=True, width=120, markup=False)
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=bar_console)
    ctx = prefect_console(bar_console) if shared else None
    if ctx:
        ctx.__enter__()
    try:
        with bar:
            task = bar.add_task("demo: iteration 0 seeds", total=302)
            bar.advance(task)
            bar.refresh()
            logger.info("14:43:09.951 | INFO | Flow run 'x' - iteration 0: reward/mean 0.5")
            bar.advance(task)
            bar.refresh()
    finally:
        if ctx:
            ctx.__exit__(None, None, None)
    return _segments(term.getvalue())


def test_a_log_line_never_continues_the_progress_bars_line(monkeypatch):
    monkeypatch.setattr(
        "thinking_seeds.flows.prefect_logs.prefect_console_handlers",
        lambda: [h for h in logging.getLogger("test.prefect_logs.bar").handlers],
    )
    together = [s for s in _bar_and_a_log_line(shared=True) if "Flow run" in s]
    assert together and all("/302" not in s for s in together), together
    # the old way: Prefect's console writes behind the bar's back, onto its line
    apart = [s for s in _bar_and_a_log_line(shared=False) if "Flow run" in s]
    assert any("/302" in s for s in apart), apart


def test_prefect_console_restores_the_handlers_consoles(monkeypatch):
    class H:
        console = "prefect's own"

    h = H()
    monkeypatch.setattr("thinking_seeds.flows.prefect_logs.prefect_console_handlers", lambda: [h])
    from thinking_seeds.flows.prefect_logs import prefect_console

    with prefect_console("the bar's"):
        assert h.console == "the bar's"
    assert h.console == "prefect's own"


def test_ts_eval_explains_its_seeded_row(capsys):
    from thinking_seeds.flows.cli.eval_output import print_result

    metrics = {"eval/prompts": 4, "eval/samples": 8, "eval/pass@1": 0.5, "eval/pass@2": 0.6}
    metrics |= {"eval_seeded/pass@1": 0.55, "eval_seeded/pass@2": 0.7}
    res = {"run_id": "r", "step": 4, "split": "validation", "metrics": metrics, "path": None}
    print_result(res, OutputFormat.table)
    out = capsys.readouterr().out
    assert "all (seeded)" in out
    legend = [line for line in out.splitlines() if line.startswith("all (seeded):")]
    assert len(legend) == 1 and "historical pool" in legend[0] and "θ_4" in legend[0]
    print_result(dict(res, metrics={k: v for k, v in metrics.items() if "seeded" not in k}), OutputFormat.table)
    assert "all (seeded)" not in capsys.readouterr().out  # no seeded row, no legend
