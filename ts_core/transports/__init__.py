"""transports: the wires between processes, each defined once for both of its ends.

    trainer_socket   the persistent trainer's Unix socket: its folder and path, one JSON message a line
    weights          θ's tensors as bytes on that socket, after the answer that names them
    live_weights     the policies this process holds in memory, where every engine load looks first
    ray_objects      what the driver puts into Ray's object store for its rollout workers

The ends live in the layers above (the pipeline's trainer client and the train layer's trainer server;
the update and the engines; engine/ray_workers.py's pool and its workers): ARCHITECTURE.md,
"Processes and wires".
"""
