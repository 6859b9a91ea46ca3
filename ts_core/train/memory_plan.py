"""The memory plan of a run, as arithmetic: what each process holds on each device at its peak.

Pure functions of a model's shape (`ModelShape`: read from config.json by train/memory_check.py) and
the run config; nothing here reads a file or touches a device. `ts plan` prints the result and `ts
train` refuses a config whose plan does not fit (train/memory_check.py).

Bytes per item (P: parameters, P_t: trainable ones; b: bytes of model.dtype, b_e: of the engine's dtype):
  weights           P × b                        (fp32 masters under update.mixed_precision=bf16: b = 4)
  gradients         P_t × b                      (torch keeps a parameter's gradient in its dtype)
  AdamW             P_t × 2 × b                  (exp_avg and exp_avg_sq, in the parameter's dtype)
  -> a full fine-tune in fp32 or with fp32 masters: 4 + 4 + 8 = 16 bytes per parameter
  autocast copies   2 × (P_t − embedding-only)   (bf16 autocast caches a bf16 copy of every trainable
                                                  weight a matmul reads, for the forward's lifetime)
  activations       tokens × (layers × per-layer + 3·h·s) bytes, per-layer (s: activation bytes) from
                    the tensors autograd saves in a Llama/Qwen2 layer (sdpa), measured with
                    saved_tensors_hooks: fp32 32h + 16I + 8kv; bf16 weights 16h + 8I + 4kv; bf16
                    autocast 30h + 8I + 4kv (h: hidden, I: intermediate, kv: kv_heads × head_dim).
                    With gradient checkpointing: tokens × layers × h × s (each layer's input) plus one
                    layer's full activations, recomputed in the backward.
  log-prob path     response tokens × V × LOGPROB_BYTES_FULL (20: the (B, T, V) logits,
                    update.logprob_chunk_size=null); through the LM head in chunks, one chunk's worth:
                    min(chunk, response tokens) × V × LOGPROB_BYTES_FULL (the backward recomputes a
                    chunk's logits at a time); with chunks every gradient is alive beside it (the head's
                    accumulates)
  AdamW temporaries on a CPU: 2 × the largest parameter (single-tensor AdamW); on a GPU, torch's
                    default foreach AdamW: P_t × b (one `_foreach_sqrt` temporary of every exp_avg_sq)
  FSDP2 root        2 × (P − layers × per-layer) × g (embedding, final norm, LM head: fully_shard on the
                    whole model does not reshard them after the forward; their gradients, unsharded
                    until the end of the backward; g: the all-gather dtype)
  KV cache          layers × 2 × kv_heads × head_dim × b_e × batch × (prompt + max_new_tokens)
  hand-over         P × b_e per policy held in memory by the pipeline (θ from the persistent trainer)
  evaluation        eval.prompts × eval.samples responses, all held in host memory until scored
                    (evals/evaluation.py), each 8 B per prompt token (its context list) + 44 B per
                    response token (token ids as Python ints, 8 + 32 B, and ~4 B of decoded text) +
                    ~1 KiB of objects (its output, verdict, sample row); tracemalloc on synthetic
                    responses of 256 + 512 tokens: 25.2 KB each, the formula 25.6 KB

A process's peak is the largest of its phases (generation; the update's forward/backward; the optimizer
step), each the sum of what is alive then; a device's total is the sum of its processes' peaks (each
process's allocator keeps its own peak) plus a CUDA context per process on a GPU; a GPU's total is
compared with its memory less a margin for the caching allocator (train/memory_fit.py GPU_MARGIN).

One file past 400 lines on purpose: every item above and the constant it is charged with are read
together, and `ts plan`'s accuracy tests (tests/unit/test_memory_plan*.py) check the file as one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from thinking_seeds.config import RunConfig
from thinking_seeds.config.placement import placement
from thinking_seeds.engine.token_scores import chunk_tokens

__all__ = [
    "CUDA_CONTEXT_BYTES",
    "LOGPROB_BYTES_FULL",
    "Item",
    "ModelShape",
    "ProcessPlan",
    "RunSizes",
    "activation_bytes",
    "device_totals",
    "evaluation_item",
    "gib",
    "plan_processes",
    "run_sizes",
]

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# Bytes per (response token × vocabulary entry) of the update's log-prob path (forward + backward, with
# the entropy) through the (B, T, V) logits: 19.8 measured at V = 151,936 on the CPU (fp32 copy of the
# logits, softmax, p·logits and autograd's saved tensors); bench/memory_plan.py checks it.
LOGPROB_BYTES_FULL = 20.0
# The chunked path (update.logprob_chunk_size: engine/token_scores.py) keeps no (tokens, V) tensor: its
# backward recomputes one chunk's logits at a time, so it holds one chunk of the plain path's tensors
# (bench/memory_plan.py, V = 151,936: ~0.16 GiB at chunks of 55 tokens, whatever the micro-batch); the LM
# head's gradient accumulates over the chunks, so all the gradients are counted alive beside it.
# What a CUDA process holds before its first tensor (context, cuBLAS workspace): ~0.5 GiB on recent GPUs.
CUDA_CONTEXT_BYTES = 512 * 2**20
EVAL_BYTES_PER_PROMPT_TOKEN = 8  # the evaluation's host memory per response (module docstring)
EVAL_BYTES_PER_RESPONSE_TOKEN = 44
EVAL_BYTES_PER_RESPONSE = 1024
PROMPT_TOKENS_DEFAULT = 256  # when the data's prompts cannot be read (train/prompt_lengths.py measures them)
CHECKPOINTING_FROM_PARAMS = 10**9  # update.gradient_checkpointing unset: on from this many parameters


@dataclass(frozen=True)
class ModelShape:
    """What the plan needs of a model: its exact parameter count (from a meta-device model) and sizes."""

    params: int
    layers: int
    hidden: int
    intermediate: int
    kv_heads: int
    head_dim: int
    vocab: int
    embedding_only: int  # parameters read by a lookup only (an untied input embedding), not by a matmul
    largest_param: int  # elements of the largest parameter tensor (the embedding, at real vocabularies)
    largest_layer: int  # parameters of one decoder layer
    lora_params: int = 0  # trainable adapter parameters under model.lora (0: full fine-tune)
    max_positions: int | None = None  # max_position_embeddings: no prompt is longer than this less the budget

    @property
    def trainable(self) -> int:
        return self.lora_params or self.params

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim


@dataclass(frozen=True)
class Item:
    name: str
    bytes: float
    formula: str


@dataclass
class ProcessPlan:
    """One process on one device: its items, and which of them are alive together in each phase."""

    role: str
    device: str
    items: list[Item] = field(default_factory=list)
    phases: dict[str, list[str]] = field(default_factory=dict)  # phase -> names of the items alive in it

    def item(self, name: str) -> float:
        return sum(i.bytes for i in self.items if i.name == name)

    def phase_bytes(self) -> dict[str, float]:
        return {p: sum(self.item(n) for n in names) for p, names in self.phases.items()}

    @property
    def peak_phase(self) -> str:
        pb = self.phase_bytes()
        return max(pb, key=pb.get) if pb else ""

    @property
    def peak(self) -> float:
        return max(self.phase_bytes().values(), default=0.0) + (CUDA_CONTEXT_BYTES if self.on_gpu else 0.0)

    @property
    def on_gpu(self) -> bool:
        return self.device.startswith("cuda")


@dataclass(frozen=True)
class RunSizes:
    """The token counts of the run's largest micro-batch and generation batch, and its switches."""

    rows: int  # sequences in one micro-batch
    response_tokens: int  # response tokens of a micro-batch (the log-prob path's rows)
    tokens: int  # input tokens of a micro-batch (context + response: the activations' rows)
    kv_tokens: int  # the engine's KV cache: batch × (prompt + max_new_tokens)
    engine_rows: int  # rows the engine samples together
    world: int  # trainer processes in the group
    checkpointing: bool
    logprob_chunk: int | None  # tokens per chunk of the LM head (None: the (B, T, V) path)


def gib(n: float) -> float:
    return n / 2**30


def logprob_chunk(cfg: RunConfig, vocab: int) -> int | None:
    """Tokens per chunk of the update's LM head (update.logprob_chunk_size; 0: the automatic size of
    engine/token_scores.py), or None for the (B, T, V) logits (update.logprob_chunk_size=null)."""
    size = cfg.update.logprob_chunk_size
    return None if size is None else chunk_tokens(vocab, size)


def logprob_path_bytes(response_tokens: int, vocab: int, chunk: int | None) -> tuple[float, str]:
    """The log-prob path's peak bytes and its formula (module docstring)."""
    if chunk is None:
        return response_tokens * vocab * LOGPROB_BYTES_FULL, (
            f"{response_tokens} response tokens × V {vocab} × {LOGPROB_BYTES_FULL:g} B (the (B, T, V) logits)"
        )
    held = min(chunk, response_tokens)
    return held * vocab * LOGPROB_BYTES_FULL, (
        f"one chunk: {held} tokens × V {vocab} × {LOGPROB_BYTES_FULL:g} B (of {response_tokens} response tokens, "
        "a chunk at a time)"
    )


def checkpointing_on(cfg: RunConfig, shape: ModelShape) -> bool:
    """update.gradient_checkpointing, its automatic default (None) resolved as the trainer does: on from
    1B parameters."""
    on = cfg.update.gradient_checkpointing
    return shape.params >= CHECKPOINTING_FROM_PARAMS if on is None else bool(on)


def run_sizes(cfg: RunConfig, shape: ModelShape, prompt_tokens: int = PROMPT_TOKENS_DEFAULT) -> RunSizes:
    """The sizes the plan is computed at: the largest micro-batch one trainer process can be given."""
    u, r = cfg.update, cfg.rollout
    world = u.num_processes * u.num_machines
    seqs = r.prompts_per_iteration * r.group_size
    per_process = max(1, math.ceil(seqs / u.mini_batches / world))
    seq = prompt_tokens + r.max_new_tokens
    budget = u.max_tokens_per_micro_batch
    if budget is not None and u.packed:  # one row of concatenated sequences, at most `budget` tokens
        tokens = min(budget, per_process * seq)
        rows, response = max(1, tokens // seq), tokens * r.max_new_tokens // seq
    else:  # padded rows × (longest context + longest response); a longer sequence trains alone
        rows = min(per_process, max(1, budget // seq) if budget is not None else u.micro_batch_size)
        tokens, response = rows * seq, rows * r.max_new_tokens
    return RunSizes(
        rows=rows,
        response_tokens=response,
        tokens=tokens,
        kv_tokens=r.batch_size * seq,
        engine_rows=r.batch_size,
        world=world,
        checkpointing=checkpointing_on(cfg, shape),
        logprob_chunk=logprob_chunk(cfg, shape.vocab),
    )


def activation_bytes(shape: ModelShape, tokens: int, kind: str, checkpointing: bool) -> float:
    """Bytes autograd keeps for the backward of `tokens` tokens (kind: float32, bfloat16 or autocast)."""
    h, inter, kv = shape.hidden, shape.intermediate, shape.kv_dim
    per_layer = {  # bytes per token and layer (module docstring: measured with saved_tensors_hooks)
        "float32": 32 * h + 16 * inter + 8 * kv,
        "bfloat16": 16 * h + 8 * inter + 4 * kv,
        "autocast": 30 * h + 8 * inter + 4 * kv,
    }[kind]
    s = 2 if kind == "bfloat16" else 4  # the residual stream's bytes (fp32 under autocast)
    fixed = 3 * h * s  # the embedding's output, the final norm, the hidden states the LM head reads
    if checkpointing:  # each layer's input, plus one layer recomputed at a time in the backward
        return tokens * (shape.layers * h * s + per_layer + fixed)
    return tokens * (shape.layers * per_layer + fixed)


def _trainer_items(
    shape: ModelShape, cfg: RunConfig, z: RunSizes, shards: int, on_gpu: bool
) -> tuple[list[Item], list, list]:
    """The trainer's items, and the names alive in its forward/backward and in its optimizer step (`on_gpu`:
    the trainer runs on CUDA, where AdamW is torch's foreach implementation)."""
    b = DTYPE_BYTES[cfg.model.dtype]
    mixed = cfg.update.mixed_precision == "bf16"
    P, Pt = shape.params, shape.trainable
    per = f" / {shards} ranks" if shards > 1 else ""
    kind = "autocast" if mixed else cfg.model.dtype
    ck = "with" if z.checkpointing else "without"
    other = "false" if z.checkpointing else "true"
    items = [
        Item("weights", P * b / shards, f"P × {b} B{per}" + (" (fp32 masters)" if mixed else "")),
        Item("gradients", Pt * b / shards, f"P_trainable × {b} B{per}"),
        Item("AdamW", 2 * Pt * b / shards, f"P_trainable × 2 × {b} B{per} (exp_avg, exp_avg_sq)"),
        Item(
            "activations",
            activation_bytes(shape, z.tokens, kind, z.checkpointing),
            f"{z.tokens} tokens ({z.rows} row{'s' if z.rows > 1 else ''}) × {shape.layers} layers ({kind}), "
            f"{ck} gradient checkpointing",
        ),
        Item(
            f"(activations with gradient_checkpointing={other})",
            activation_bytes(shape, z.tokens, kind, not z.checkpointing),
            "not counted: what update.gradient_checkpointing=" + other + " would hold instead",
        ),
        Item("log-prob path", *logprob_path_bytes(z.response_tokens, shape.vocab, z.logprob_chunk)),
    ]
    # the (B, T, V) buffers go with the head's backward, before the body's gradients come; in chunks the
    # head's gradient accumulates while the path is alive, and the body's follow (measured: all of them)
    grads = "largest gradient" if z.logprob_chunk is None else "gradients"
    fwd = ["weights", "AdamW", "activations", "log-prob path", grads]
    step = ["weights", "AdamW", "gradients", "optimizer temporaries"]
    # The LM head's gradient lands while the log-prob path is still alive.
    big = shape.largest_param * b if shards == 1 else shape.largest_layer * b
    if shape.lora_params:  # the frozen base has no gradient; the adapters' matrices are small
        big = 0.0
    items.append(Item("largest gradient", big, "the largest parameter's gradient, at the start of the backward"))
    if on_gpu:  # torch's CUDA default: foreach AdamW, whose _foreach_sqrt(exp_avg_sq) is one temporary of all
        items.append(
            Item("optimizer temporaries", Pt * b / shards, f"P_trainable × {b} B{per} (foreach AdamW's sqrt(v))")
        )
    else:  # single-tensor AdamW: a few temporaries of one parameter's size at a time
        items.append(
            Item("optimizer temporaries", 2 * big, "2 × the largest parameter (AdamW's per-tensor temporaries)")
        )
    if mixed:
        copies = 2 * (Pt if shape.lora_params else Pt - shape.embedding_only) / shards
        items.append(Item("autocast copies", copies, f"2 B × trainable matmul weights{per}"))
        fwd.append("autocast copies")
    if shards > 1:  # FSDP2: a layer's full parameters are all-gathered around its forward and backward
        g = 2 if mixed else b  # bf16 all-gathers under mixed precision (strategy.py's MixedPrecisionPolicy)
        items.append(Item("all-gathered layer", 2 * shape.largest_layer * g, f"2 decoder layers × {g} B"))
        root = max(0, shape.params - shape.layers * shape.largest_layer)
        items.append(
            Item(
                "FSDP2 root (unsharded)",
                2 * root * g,
                f"2 × {root:,} root parameters × {g} B (embedding, final norm, LM head and their gradients: "
                "all-gathered through the forward and backward)",
            )
        )
        fwd.append("all-gathered layer")
        fwd.append("FSDP2 root (unsharded)")
    if cfg.loss.kl_coef > 0:
        items.append(Item("reference model", P * b, f"P × {b} B (loss.kl_coef > 0)"))
        fwd.append("reference model")
        step.append("reference model")
    return items, fwd, step


def _engine_items(shape: ModelShape, cfg: RunConfig, z: RunSizes, tp: int) -> list[Item]:
    be = DTYPE_BYTES[cfg.engine_dtype]
    per = f" / {tp} GPUs" if tp > 1 else ""
    kv = shape.layers * 2 * shape.kv_dim * be * z.kv_tokens / tp
    return [
        Item("engine weights", shape.params * be / tp, f"P × {be} B ({cfg.engine_dtype}){per}"),
        Item(
            "KV cache",
            kv,
            f"{shape.layers} layers × 2 × {shape.kv_heads} kv heads × {shape.head_dim} × {be} B × "
            f"{z.kv_tokens} tokens{per}",
        ),
        Item("sampling logits", 3 * z.engine_rows * shape.vocab * 4, f"3 × {z.engine_rows} rows × V × 4 B"),
    ]


def evaluation_item(cfg: RunConfig, prompt_tokens: int = PROMPT_TOKENS_DEFAULT) -> Item:
    """The host memory of one evaluation's responses (eval.prompts × eval.samples), held until scored."""
    e, new = cfg.eval, cfg.rollout.max_new_tokens
    per = EVAL_BYTES_PER_PROMPT_TOKEN * prompt_tokens + EVAL_BYTES_PER_RESPONSE_TOKEN * new + EVAL_BYTES_PER_RESPONSE
    return Item(
        "evaluation responses",
        e.prompts * e.samples * per,
        f"{e.prompts} prompts × {e.samples} samples × ({prompt_tokens} × {EVAL_BYTES_PER_PROMPT_TOKEN} + {new} × "
        f"{EVAL_BYTES_PER_RESPONSE_TOKEN} + {EVAL_BYTES_PER_RESPONSE}) B, held until scored",
    )


def _add_evaluation(out: list[ProcessPlan], item: Item) -> None:
    """Put the evaluation's responses in the pipeline's host memory: beside the engine's generation when
    the pipeline runs on the CPU (its own phase: the evaluation samples with the same engine), else in the
    pipeline's host-memory entry, held with the policies handed over (made for it under in_process)."""
    pipeline = next(p for p in out if p.role.startswith("pipeline (engine"))
    if pipeline.device == "cpu":
        pipeline.items.append(item)
        pipeline.phases["evaluation"] = [*pipeline.phases["generation"], item.name]
        return
    host = next((p for p in out if p.role == "pipeline (host memory)"), None)
    if host is None:
        out.append(ProcessPlan("pipeline (host memory)", "cpu", [item], {"held": [item.name]}))
    else:
        host.items.append(item)
        host.phases["held"].append(item.name)


def _devices(cfg: RunConfig, gpus: int) -> tuple[list[str], list[str]]:
    """(engine devices, trainer rank devices on this machine): the run's placement (config/placement.py)
    on `gpus` visible GPUs."""
    where = placement(cfg, gpus)
    if not where.engine_gpus and not where.trainer_gpus:
        return ["cpu"], ["cpu"] * (1 if cfg.update.launcher == "in_process" else cfg.update.num_processes)
    engine = [f"cuda:{g}" for g in where.engine_gpus] or [where.engine_device]
    if cfg.update.launcher == "in_process":
        return engine, [where.trainer_device]
    return engine, [f"cuda:{g}" for g in where.trainer_gpus]


def plan_processes(shape: ModelShape, cfg: RunConfig, gpus: int, prompt_tokens: int = PROMPT_TOKENS_DEFAULT):
    """Every process of the run on this machine, per device: [ProcessPlan]. `gpus`: visible GPUs."""
    z = run_sizes(cfg, shape, prompt_tokens)
    engine_devs, trainer_devs = _devices(cfg, gpus)
    tp = len(engine_devs)
    shards = z.world if cfg.update.strategy == "fsdp2" else 1
    t_items, fwd, step = _trainer_items(shape, cfg, z, shards, on_gpu=trainer_devs[0].startswith("cuda"))
    e_items = _engine_items(shape, cfg, z, tp)
    be = DTYPE_BYTES[cfg.engine_dtype]
    gen = ["engine weights", "KV cache", "sampling logits"]
    out: list[ProcessPlan] = []
    if cfg.update.launcher == "in_process":  # one process: the engine's model beside the trainer's
        p = ProcessPlan("pipeline (engine + trainer)", trainer_devs[0], e_items + t_items)
        p.phases = {
            "generation": gen + ["weights", "AdamW"],
            "update forward/backward": ["engine weights"] + fwd,
            "optimizer step": ["engine weights"] + step,
        }
        out.append(p)
        for d in engine_devs[1:]:
            out.append(ProcessPlan("engine (tensor parallel)", d, e_items, {"generation": gen}))
        _add_evaluation(out, evaluation_item(cfg, prompt_tokens))
        return out
    for d in engine_devs:
        out.append(ProcessPlan("pipeline (engine)", d, list(e_items), {"generation": gen}))
    keep = max(2, cfg.pipeline.max_staleness + 1)
    host = ProcessPlan(
        "pipeline (host memory)",
        "cpu",
        [Item("hand-over buffers", keep * shape.params * be, f"{keep} policies × P × {be} B")],
        {"held": ["hand-over buffers"]},
    )
    if engine_devs[0] == "cpu":  # on the CPU the host is the device
        out[0].items.append(host.items[0])
        out[0].phases = {"generation": gen + ["hand-over buffers"]}
    else:
        out.append(host)
    for rank, d in enumerate(trainer_devs):
        out.append(
            ProcessPlan(
                f"trainer rank {rank}",
                d,
                list(t_items),
                {"update forward/backward": fwd, "optimizer step": step},
            )
        )
    _add_evaluation(out, evaluation_item(cfg, prompt_tokens))
    return out


def device_totals(processes: list[ProcessPlan]) -> dict[str, float]:
    """Device -> the sum of its processes' peaks ('cpu': host memory)."""
    totals: dict[str, float] = {}
    for p in processes:
        totals[p.device] = totals.get(p.device, 0.0) + p.peak
    return totals
