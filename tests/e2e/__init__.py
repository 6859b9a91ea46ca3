"""End-to-end tests (marked slow, CI's second step `make test-slow`): deployments on a process worker,
kill -9 resume under Prefect, the comparison end to end, the wheel outside the checkout, ..."""
