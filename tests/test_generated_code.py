"""The committed generated code is exactly what `make proto` produces from proto/."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROTO = REPO / "proto"


def test_generated_python_code_is_current(tmp_path: Path) -> None:
    protos = sorted(str(p.relative_to(PROTO)) for p in (PROTO / "shardcron" / "v1").glob("*.proto"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTO}",
            f"--python_out={tmp_path}",
            f"--grpc_python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            *protos,
        ],
        check=True,
        cwd=PROTO,
    )
    generated = sorted(p.name for p in (tmp_path / "shardcron" / "v1").iterdir())
    assert generated, "protoc generated nothing"
    stale = [
        name
        for name in generated
        if not filecmp.cmp(
            tmp_path / "shardcron" / "v1" / name, PROTO / "shardcron" / "v1" / name, shallow=False
        )
    ]
    assert not stale, f"stale generated code (run `make proto`): {stale}"
