"""evals: how good a policy is, and the run report.

Its modules:
    evaluation.py     sample-and-score evaluation: avg@n and pass@k on a held-out split
    benchmark.py      scores on a user's benchmark per data source: avg@n, pass@k, maj@k
    majority.py       maj@k, answers grouped by math-verify equivalence
    report.py         the run report (`ts report`); its curves, seeds by source checkpoint and prefix
                      diversity by source age in report_plots.py
"""
