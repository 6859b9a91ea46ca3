"""A stage's manifest: what it wrote (paths, content hashes, row counts), what it read (upstream
digests), its metrics and timings. It is the resume truth: a stage counts as done when its manifest
exists and every output still hashes as recorded (`RunDir.completed`).

The JSON layout (`asdict`, sorted keys) is a contract with every run written before: a field added
here would change every manifest's bytes; a field renamed would make old manifests unreadable.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from thinking_seeds.store.run_dir import RunDir


@dataclass
class Manifest:
    """What a stage wrote: enough to check it later and to decide whether the next stage is done."""

    stage: str
    iteration: int
    config_hash: str
    outputs: dict[str, str] = field(default_factory=dict)  # name -> path relative to the run dir
    hashes: dict[str, str] = field(default_factory=dict)  # name -> sha256 of the file (or manifest)
    rows: dict[str, int] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)  # timing breakdown of the stage
    upstream: dict[str, str] = field(default_factory=dict)  # "stage@k" -> digest of each input stage

    def record(self, run: RunDir, name: str, path: Path, rows: int | None = None) -> None:
        """Note one output: its path (relative to the run), its content hash and, for a table, its rows."""
        self.outputs[name] = run.rel(path)
        self.hashes[name] = run.file_hash(path)
        if rows is not None:
            self.rows[name] = rows

    @property
    def digest(self) -> str:
        """One hash of this stage's data outputs and of its inputs' digests (a Merkle chain): what the
        next stage records as its upstream. A change anywhere upstream changes every digest below it.
        The metrics file is left out: it holds timings, and no stage reads it."""
        data = {k: v for k, v in self.hashes.items() if k != "metrics"}
        blob = json.dumps({"hashes": data, "upstream": self.upstream}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]
