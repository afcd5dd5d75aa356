"""Which variant owns a key along extends, and the edit or note for an index override."""

from __future__ import annotations

from matrixtool.update import edits, yamltext


def test_key_owner_follows_extends() -> None:
    raw = {"variants": {"cuda": {"vllm": {"version": "1"}, "index": {"wheelhouse": False}}, "arm": {"extends": "cuda"}}}
    assert edits.key_owner(raw, "arm", ("vllm", "version")) == "cuda"
    assert edits.key_owner(raw, "arm", ("triton_distribution",)) == "cuda"
    assert edits.key_owner(raw, "cuda", ("index", "wheelhouse")) == "cuda"


def test_index_override_edit_or_note() -> None:
    edit = edits.override_edit("torch==2.13.0+cpu", 1, "torch", "2.14.0+cpu")
    assert edit == yamltext.ScalarEdit(path=("index", "overrides", "1"), value="torch==2.14.0+cpu")
    assert edits.override_edit("torch>=2.13", 0, "torch", "2.14.0") is None  # admits the new torch
    assert edits.override_edit("numpy<2", 0, "torch", "2.14.0") is None
    note = edits.override_edit('torch<2.14; platform_machine == "x86_64"', 0, "torch", "2.14.0")
    assert isinstance(note, str) and "edit or drop it" in note
