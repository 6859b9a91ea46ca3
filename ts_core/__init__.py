"""thinking-seeds core: the algorithm and its data. Pure Python + torch/transformers; never imports prefect."""
