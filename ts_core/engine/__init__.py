"""engine: models and the engines that sample from them (the `Engine` protocol of rollout.py).

Its modules:
    models.py, lora.py        load a Hugging Face causal LM (or build the tiny one); LoRA adapters
    rollout.py, prefill.py    the HF engine, and how it plans a batch's prefill
    vllm_engine.py            the vLLM engine, in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0); its LoRA side
                              in vllm_adapters.py, what it is started with in vllm_args.py (a pure function:
                              length, dtype, eager or CUDA graphs, KV cache or GPU memory share)
    sharding.py               shards of a generation call with their own seeds, and `build_engine`
    ray_workers.py            Ray rollout workers (cluster=ray) that each hold an engine and run shards
    scoring.py, token_scores.py   per-token log-probs and entropies under a model (the trainer's forward)
"""
