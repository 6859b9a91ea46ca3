"""The lock every model load of ours holds (store/checkpoints.py re-exports it): its own module so that
the weights check, which checkpoints imports, can hold it too without an import cycle."""

import threading

__all__ = ["MODEL_LOAD_LOCK"]

# One model load at a time per process. transformers' from_pretrained swaps class attributes of
# PreTrainedModel while it loads (transformers/initialization.py: no_tie_weights, no_init_weights):
# two loads in two threads (pipeline.overlap's seeds-ahead thread, Prefect's task threads) can each
# restore the other's swap and leave tie_weights a no-op for the rest of the process, after which
# every load of a model with tied embeddings has lm_head on the meta device ("Cannot copy out of
# meta tensor"). Every from_pretrained of ours (models, adapters) runs under this lock.
MODEL_LOAD_LOCK = threading.RLock()
