"""One-study analyses: scripts a results page ran once to answer one question about a base model or a
mechanism (`python -m thinking_seeds.studies.<name>`), kept runnable so the page can be reproduced.
`ts compare` never imports them; what it reports lives in experiments/."""
