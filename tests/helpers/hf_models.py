"""Tiny random Hugging Face models of real architectures, built offline for tests: a byte-level BPE
tokenizer trained locally with `tokenizers`, a ChatML chat template, and a Llama, Qwen2 or SmolLM2-family
model (SmolLM2 is a Llama with its own conventions, copied from SmolLM2-135M-Instruct: pad = EOS =
<|im_end|>, BOS <|im_start|>, rope_theta 1e5, a chat template that adds a default system turn, weights
saved in bf16)."""

from __future__ import annotations

from pathlib import Path

import torch

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


# SmolLM2-135M-Instruct's chat template, as its tokenizer_config.json ships it.
SMOLLM2_CHAT = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
ARCHS = ("llama", "qwen2", "smollm2")


def bpe_tokenizer(corpus: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHATML
    return fast


def build(path: Path, arch: str) -> Path:
    """A ~50k-parameter random `arch` (one of ARCHS) model with its tokenizer, saved at `path`."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from thinking_seeds.data.chain_sum import question, solution

    corpus = [
        question(f"{a}+{b}-{c}") + " " + solution(f"{a}+{b}-{c}", "a")
        for a in range(1, 20)
        for b in range(1, 20, 3)
        for c in range(1, 20, 5)
    ]
    tok = bpe_tokenizer(corpus)
    kw = dict(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.eos_token_id,
        tie_word_embeddings=True,
    )
    if arch not in ARCHS:
        raise ValueError(f"arch {arch!r}: one of {ARCHS}")
    if arch == "smollm2":  # SmolLM2-135M-Instruct's conventions on the same BPE (its special tokens: ids 0, 1, 2)
        tok.pad_token, tok.bos_token, tok.unk_token = "<|im_end|>", "<|im_start|>", "<|endoftext|>"
        tok.chat_template = SMOLLM2_CHAT
        kw.update(
            pad_token_id=tok.eos_token_id,
            bos_token_id=tok.bos_token_id,
            rope_theta=100000.0,
            rms_norm_eps=1e-5,
            head_dim=16,
            max_position_embeddings=2048,  # room for ASDiv's prompts under its system turn (SmolLM2's own: 8192)
        )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**kw)) if arch == "qwen2" else LlamaForCausalLM(LlamaConfig(**kw))
    if arch == "smollm2":
        model.to(torch.bfloat16)  # as SmolLM2's own checkpoints are stored
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path
