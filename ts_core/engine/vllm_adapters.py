"""The LoRA side of `VLLMEngine` (vllm_engine.py): adapters served as `LoRARequest`s, or merged into full
weights by peft and swapped in; and the checkpoint-file helpers both sides use.

With `rollout.lora_requests` the engine starts with `enable_lora` on θ_0 and a checkpoint after θ_0 is
a request for its adapter directory (each adapter's contents get their own int id: vLLM caches
adapters and prefix KV blocks by id). Without it, `_merged_dir` writes an adapter step's full weights
once and keeps the last few. A mixin, so the engine's state (`_loras`, `_merged`, `base_dir`, ...)
stays in one object; vLLM is imported only inside the methods.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

OPTIMIZER_FILE = "optimizer.safetensors"
ADAPTER_FILE = "adapter_model.safetensors"
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's LoRAConfig.max_lora_rank choices


def lora_rank_slot(r: int) -> int:
    """The smallest `max_lora_rank` vLLM accepts that holds adapters of rank `r`."""
    for slot in VLLM_LORA_RANKS:
        if slot >= r:
            return slot
    raise ValueError(f"model.lora.r={r} is above vLLM's largest LoRA rank {VLLM_LORA_RANKS[-1]}: lower model.lora.r")


def _verify(ckpt: Path) -> None:
    """Never hand vLLM weights their manifest does not vouch for (as HFEngine.load_weights)."""
    if (ckpt / "manifest.json").is_file():
        from thinking_seeds.store.checkpoints import verified

        verified(ckpt)


def _read_json(p: Path) -> dict:
    import json

    return json.loads(p.read_text())


class VLLMAdapters:
    """LoRA adapters for `VLLMEngine` (see the module docstring); mixed into the engine class."""

    @staticmethod
    def _adapter_tag(ckpt: Path) -> str:
        st = (ckpt / ADAPTER_FILE).stat()
        return f"{ckpt.resolve()}|{st.st_mtime_ns}|{st.st_size}"

    def adapter_request(self, ckpt: str | Path):
        """The `LoRARequest` that serves checkpoint `ckpt` on the base (None: `ckpt` is the base, θ_0).

        Each adapter's contents get their own int id (a rewritten directory is a new adapter: vLLM caches
        adapters and prefix KV blocks by id); its manifest is verified once."""
        from vllm.lora.request import LoRARequest

        from thinking_seeds.engine.lora import is_adapter

        if not self.lora_requests:
            raise ValueError(
                "adapter_request: this engine serves no LoRA adapters (needs model.lora and rollout.lora_requests)"
            )
        ckpt = Path(ckpt)
        if not is_adapter(ckpt):
            self._check_is_base(ckpt)
            return None
        if not (ckpt / ADAPTER_FILE).is_file():
            raise FileNotFoundError(
                f"{ckpt} has adapter_config.json but no {ADAPTER_FILE}: re-save the adapter with peft"
            )
        tag = self._adapter_tag(ckpt)
        req = self._loras.get(tag)
        if req is None:
            _verify(ckpt)
            r = int(_read_json(ckpt / "adapter_config.json").get("r", 0))
            if r > self.max_lora_rank:
                raise ValueError(
                    f"{ckpt}: adapter rank {r} is above the engine's max_lora_rank {self.max_lora_rank} "
                    "(model.lora.r of this run): the adapter comes from another run"
                )
            lid = len(self._loras) + 1
            req = LoRARequest(lora_name=f"ts-{lid}-{ckpt.name}", lora_int_id=lid, lora_path=str(ckpt))
            self._loras[tag] = req
        return req

    def _check_is_base(self, ckpt: Path) -> None:
        """A full checkpoint in a LoRA run must be θ_0 (the engine's base): the same weight files."""
        if ckpt.resolve() == self.base_dir.resolve():
            return

        def digests(d: Path) -> dict:
            if not (d / "manifest.json").is_file():
                return {}
            sha = _read_json(d / "manifest.json").get("sha256", {})
            return {f: h for f, h in sha.items() if f.endswith(".safetensors") and f != OPTIMIZER_FILE}

        mine = digests(self.base_dir)
        if not mine or digests(ckpt) != mine:
            raise ValueError(
                f"{ckpt} holds full weights that are not the engine's base {self.base_dir}: with model.lora and "
                "rollout.lora_requests every checkpoint after θ_0 must be a LoRA adapter of that base "
                "(or set rollout.lora_requests=false to swap weights)"
            )

    def _merged_dir(self, ckpt: Path) -> Path:
        """Full weights of an adapter step (peft merge), written once and kept for the last few adapters."""
        from safetensors.torch import save_file

        from thinking_seeds.engine.lora import base_of, merged_state_dict

        tag = self._adapter_tag(ckpt)
        for i, (t, d) in enumerate(self._merged):
            if t == tag:
                self._merged.append(self._merged.pop(i))
                return d
        out = self._tmp / ("merged-" + hashlib.sha1(tag.encode()).hexdigest()[:16])
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        state, seen = {}, set()
        for k, v in merged_state_dict(ckpt).items():  # tied weights once: safetensors refuses shared storage
            if v.data_ptr() not in seen:
                seen.add(v.data_ptr())
                state[k] = v.contiguous()
        save_file(state, str(out / "model.safetensors"))
        shutil.copy2(base_of(ckpt) / "config.json", out / "config.json")
        self._merged.append((tag, out))
        while len(self._merged) > self._keep_merged:
            shutil.rmtree(self._merged.pop(0)[1], ignore_errors=True)
        return out
