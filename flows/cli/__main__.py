"""`python -m thinking_seeds.flows.cli ...`: the same as `ts ...`."""

from thinking_seeds.flows.cli import main

main()
