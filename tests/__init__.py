"""The test suite (a package, so shared code imports as `tests.helpers.*`): unit/, integration/, e2e/."""
