"""`ts plan`: the memory plan of a run before anything starts (train/memory_plan.py): per process and
device, the expected peak and what it is made of, against the devices of this machine (or of the one
named by --gpus/--gpu-gib). Exit code 2, after the plan, when it does not fit: the line `ts train` would
refuse the run with."""

from __future__ import annotations

import typer

from thinking_seeds.flows.cli.output import console, error_line, given
from thinking_seeds.flows.cli.train import PRESET_HELP


def plan(
    ctx: typer.Context,
    preset: str = typer.Option("tiny", "--preset", "-p", help=PRESET_HELP),
    set_: list[str] = typer.Option([], "--set", "-s", help="Override a config key: section.key=value (repeatable)."),
    gpus: int | None = typer.Option(
        None, "--gpus", min=0, help="Plan for this many GPUs instead of the ones visible here (with --gpu-gib)."
    ),
    gpu_gib: float = typer.Option(80.0, "--gpu-gib", min=0.0, help="With --gpus: each GPU's memory, in GiB."),
    host_gib: float | None = typer.Option(
        None, "--host-gib", min=0.0, help="Plan for this much host memory, in GiB, instead of this machine's RAM."
    ),
    prompt_tokens: int | None = typer.Option(
        None,
        "--prompt-tokens",
        min=1,
        help="The longest prompt, in tokens. Default: the data's longest (its splits built and tokenized as "
        "the run will), or 256 when the data cannot be read here.",
    ),
) -> None:
    """Print the expected peak memory of every process of a run on each device: weights, gradients,
    AdamW, activations (with and without gradient checkpointing), the log-prob path, KV cache and
    hand-over buffers; exit 2 if it cannot fit."""
    if gpus is None and given(ctx, "gpu_gib"):
        # else the plan is for this machine's GPUs, and the memory asked about is ignored
        raise typer.BadParameter("--gpu-gib goes with --gpus N: add --gpus, or leave out --gpu-gib")
    from thinking_seeds.config import load_config
    from thinking_seeds.train.memory_check import capacities, model_shape, visible_gpus
    from thinking_seeds.train.memory_fit import GPU_MARGIN, refusal, usable
    from thinking_seeds.train.memory_plan import device_totals, gib, plan_processes

    cfg = load_config(preset, set_)
    if gpus and cfg.device == "auto":  # auto on the machine planned for: its GPUs, and its defaults (bf16)
        cfg = load_config(preset, [*set_, "device=cuda"])
    shape = model_shape(cfg.model.path, cfg.model.lora)
    source = "--prompt-tokens"
    if prompt_tokens is None:
        from thinking_seeds.train.memory_plan import PROMPT_TOKENS_DEFAULT
        from thinking_seeds.train.prompt_lengths import longest_prompt_tokens

        measured = longest_prompt_tokens(cfg)
        prompt_tokens = measured or PROMPT_TOKENS_DEFAULT
        source = "the data's longest" if measured else "assumed: the data could not be read here; --prompt-tokens"
    n = visible_gpus() if gpus is None else gpus
    caps = capacities(gpus, gpu_gib * 2**30) if gpus is not None else capacities()
    if host_gib is not None:
        caps["cpu"] = host_gib * 2**30
    processes = plan_processes(shape, cfg, n, prompt_tokens)
    con = console()
    trainable = f", {shape.trainable:,} trainable (LoRA)" if shape.lora_params else ""
    con.print(
        f"model {cfg.model.path}: {shape.params:,} parameters{trainable}, {shape.layers} layers, hidden "
        f"{shape.hidden}, vocabulary {shape.vocab:,}; prompts of up to {prompt_tokens} tokens ({source})"
    )
    con.print(
        "full fine-tune: 16 bytes per parameter (fp32 weights or masters 4 + gradients 4 + AdamW's two moments 8)"
        if cfg.model.lora is None and cfg.model.dtype == "float32"
        else f"weights in {cfg.model.dtype}: gradients and AdamW's moments in the same dtype"
    )
    for p in processes:
        phases = p.phase_bytes()
        con.print(f"\n[bold]{p.role}[/] on {p.device}: peak {gib(p.peak):.2f} GiB ({p.peak_phase})")
        for item in p.items:
            con.print(f"  {item.name:<38} {gib(item.bytes):>9.3f} GiB  {item.formula}", markup=False)
        con.print("  phases: " + ", ".join(f"{k} {gib(v):.2f} GiB" for k, v in phases.items()), markup=False)
        if p.on_gpu:
            con.print("  + CUDA context 0.50 GiB", markup=False)
    con.print("")
    for dev, total in device_totals(processes).items():
        cap = caps.get(dev)
        where = "host memory" if dev == "cpu" else dev
        room = f"of {gib(cap):.1f} GiB" if cap is not None else "(not visible here: not checked)"
        if cap is not None and usable(dev, cap) < cap:
            room += f" ({gib(usable(dev, cap)):.1f} usable: {GPU_MARGIN:.0%} kept for the CUDA caching allocator)"
        con.print(f"{where}: {gib(total):.2f} GiB {room}")
    line = refusal(shape, cfg, caps, n, prompt_tokens)
    if line:
        error_line(line)
        raise typer.Exit(2)
    con.print("[green]fits[/]")
