from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from matrixtool.build import hostfiles, plan, render
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import Platform, Variant

AMD64, ARM64 = Platform("linux", "amd64"), Platform("linux", "arm64")


def _cpu() -> Variant:
    return next(v for v in load_matrix().variants if v.name == "cpu")


_BASE_FIELDS = {"base_image_id": "image_id", "base_digest": "digest", "base_local": "local_tag"}


def flat_plan(variant: Variant, *, platform: Platform, files: tuple[Any, ...], **flat: Any) -> plan.BuildPlan:
    """``plan.plan_build`` from one flat set of keywords: the base's (``base_image_id``, ``base_digest``,
    ``base_local``, ``stand_in_suite``) go to ``BaseFacts``, the rest to ``BuildInputs``."""
    base = {_BASE_FIELDS.get(k, k): flat.pop(k) for k in [*_BASE_FIELDS, "stand_in_suite"] if k in flat}
    if "wheelhouse_rows" in flat:
        flat["wheelhouse_rows"] = tuple(flat["wheelhouse_rows"])
    return plan.plan_build(
        variant, platform=platform, files=files, base=plan.BaseFacts(**base), inputs=plan.BuildInputs(**flat)
    )


def _plan(variant_name: str = "cpu", **overrides: Any) -> plan.BuildPlan:
    variant = next(v for v in load_matrix().variants if v.name == variant_name)
    kwargs: dict[str, Any] = dict(
        platform=AMD64,
        files=tuple(render.render_variant(variant)),
        base_image_id="sha256:base",
        wheelhouse=Path("/opt/wheels"),
        wheelhouse_rows=["torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl 1 2"],
        ca_cert=Path("/etc/ssl/certs/ca.crt"),
        revision="abc123",
        source_url="https://example.invalid/repo",
    )
    kwargs.update(overrides)
    return flat_plan(variant, **kwargs)


def _argv(p: plan.BuildPlan, context_dir: Path, iidfile: Path) -> list[str]:
    return plan.buildx_argv(plan.build_spec(p, context_dir=context_dir), iidfile=iidfile)


def test_argv_is_buildkit_with_secret_labels_and_tags(tmp_path: Path) -> None:
    p = _plan()
    argv = _argv(p, tmp_path / "ctx", tmp_path / "iid")
    assert argv[:3] == ["docker", "buildx", "build"]
    assert argv[argv.index("--platform") : argv.index("--platform") + 2] == ["--platform", "linux/amd64"]
    assert argv[argv.index("--output") + 1] == "type=docker"  # = --load
    assert argv[argv.index("--cache-to") + 1] == "type=inline"
    assert argv[argv.index("--secret") : argv.index("--secret") + 2] == [
        "--secret",
        "id=ca,src=/etc/ssl/certs/ca.crt",
    ]
    assert f"--label=io.vllm-matrix.content-hash={p.content_hash}" not in argv  # labels are two argv items
    assert f"io.vllm-matrix.content-hash={p.content_hash}" in argv
    assert "org.opencontainers.image.revision=abc123" in argv
    assert "org.opencontainers.image.source=https://example.invalid/repo" in argv
    assert argv[-1] == str(tmp_path / "ctx")
    assert p.refs == (f"vllm-matrix/cpu:{p.content_hash[:16]}", "vllm-matrix/cpu:0.32.0")
    assert p.hash_ref == p.refs[0]


def test_no_ca_means_no_secret(tmp_path: Path) -> None:
    argv = _argv(_plan(ca_cert=None), tmp_path, tmp_path / "iid")
    assert "--secret" not in argv


def test_content_hash_covers_inputs_but_not_the_ca_bundle() -> None:
    base = _plan().content_hash
    assert _plan(ca_cert=None).content_hash == base
    assert _plan(revision="other").content_hash == base
    assert _plan(base_image_id="sha256:other").content_hash != base
    assert _plan(platform=ARM64).content_hash != base
    assert _plan(wheelhouse_rows=["torch-2.13.0+cpu.whl 2 2"]).content_hash != base
    files = tuple(render.render_variant(_cpu()))
    edited = (type(files[0])(path=files[0].path, text=files[0].text + "\n"), *files[1:])
    assert _plan(files=edited).content_hash != base


def test_resolve_ca_cert_order() -> None:
    env = {"PIP_CERT": "/p", "REQUESTS_CA_BUNDLE": "/r"}
    assert hostfiles.resolve_ca_cert(Path("/flag"), env) == Path("/flag")
    assert hostfiles.resolve_ca_cert(None, env) == Path("/p")
    assert hostfiles.resolve_ca_cert(None, {"SSL_CERT_FILE": "/s", **env}) == Path("/s")
    assert hostfiles.resolve_ca_cert(None, {}) is None


def test_resolve_wheelhouse() -> None:
    assert hostfiles.resolve_wheelhouse(Path("/w"), {"PIP_FIND_LINKS": "/x"}) == Path("/w")
    links = {"PIP_FIND_LINKS": "https://h/x file:///opt/wheels"}
    assert hostfiles.resolve_wheelhouse(None, links) == Path("/opt/wheels")
    assert hostfiles.resolve_wheelhouse(None, {}) is None


def test_wheelhouse_fingerprint(tmp_path: Path) -> None:
    (tmp_path / "b.whl").write_bytes(b"12")
    (tmp_path / "a.whl").write_bytes(b"1")
    (tmp_path / "sub").mkdir()
    rows = plan.wheelhouse_fingerprint(tmp_path)
    assert [r.split()[:2] for r in rows] == [["a.whl", "1"], ["b.whl", "2"]]


def test_platform_tag_keeps_each_platforms_base_apart() -> None:
    from matrixtool.build.base import platform_tag

    assert platform_tag("debian:bookworm-slim", ARM64) == "debian:bookworm-slim-arm64"
    assert platform_tag("nvidia/cuda:12.9.1-cudnn-runtime-ubuntu24.04", AMD64) == (
        "nvidia/cuda:12.9.1-cudnn-runtime-ubuntu24.04-amd64"
    )
    assert platform_tag("127.0.0.1:5000/debian", ARM64) == "127.0.0.1:5000/debian:latest-arm64"


@pytest.mark.parametrize(
    "ref",
    ["debian@sha256:" + "a" * 64, "debian:12@sha256:" + "a" * 64, "x:" + "a" * 125, "localhost:5000/ns/x:1"],
)
def test_platform_tag_is_a_reference_for_every_base_image_the_grammar_takes(ref: str) -> None:
    """Before: a digest's ``:`` was read as the tag's (``debian@sha256:<hex>-arm64``) and a long tag went past 128."""
    from matrixtool.build.base import platform_tag
    from matrixtool.model.reference import image_problem

    assert image_problem(ref) is None
    tags = {platform_tag(ref, platform) for platform in (AMD64, ARM64)}
    assert len(tags) == 2 and all(image_problem(t) is None for t in tags), tags


def test_base_ref_prefers_pin_then_local_platform_tag() -> None:
    p = _plan()
    assert p.base_ref == "debian:bookworm-slim"
    local = flat_plan(
        _cpu(),
        platform=AMD64,
        files=p.files,
        base_image_id="sha256:base",
        wheelhouse=None,
        wheelhouse_rows=[],
        ca_cert=None,
        revision="r",
        source_url="s",
        base_local="debian:bookworm-slim-amd64",
    )
    assert local.base_ref == "debian:bookworm-slim-amd64"
    assert "BASE_IMAGE=debian:bookworm-slim-amd64" in _argv(local, Path("/c"), Path("/i"))
    assert (
        local.content_hash
        == flat_plan(
            _cpu(),
            platform=AMD64,
            files=p.files,
            base_image_id="sha256:base",
            wheelhouse=None,
            wheelhouse_rows=[],
            ca_cert=None,
            revision="r",
            source_url="s",
        ).content_hash
    )  # the local tag is a name for the same base image: not an input


def test_stand_in_with_another_python_passes_it_as_a_build_arg(tmp_path: Path) -> None:
    cuda = next(v for v in load_matrix().variants if v.name == "cuda")
    assert (cuda.python, cuda.stand_in_suite, cuda.stand_in_python) == ("3.12", "bookworm", "3.11")
    no_inputs: dict[str, Any] = dict(wheelhouse=None, wheelhouse_rows=[], ca_cert=None)
    on_stand_in = _plan("cuda", stand_in_suite="bookworm", **no_inputs)
    assert on_stand_in.build_args["PYTHON_VERSION"] == "3.11"
    argv = _argv(on_stand_in, tmp_path, tmp_path / "iid")
    assert "PYTHON_VERSION=3.11" in argv
    upstream = _plan("cuda", **no_inputs)
    assert "PYTHON_VERSION" not in upstream.build_args  # the Dockerfile's default (3.12) applies
    # cpu's suite ships its Python: nothing to override.
    assert "PYTHON_VERSION" not in _plan(stand_in_suite="bookworm").build_args


def test_a_stand_in_whose_python_the_matrix_does_not_accept_is_a_config_error() -> None:
    import pytest

    from matrixtool.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r'add python: "3.13" to stand_in'):
        plan.stand_in_python(_cpu(), "trixie")


def test_a_tag_is_a_cached_build_only_when_its_image_carries_the_plans_content_hash() -> None:
    """What the tool remembers is what it built: an image tagged with a plan's content-hash tag by hand (or by
    another tool) is no build of that plan, and is built over."""
    import docker.errors

    from matrixtool.build import executor

    the_plan = _plan()

    class Image:
        def __init__(self, labels: object) -> None:
            self.id = "sha256:" + "e" * 64
            self.attrs = {"Size": 123, "Config": {"Labels": labels}}

    class Images:
        def __init__(self, found: dict[str, Image]) -> None:
            self.found = found

        def get(self, ref: str) -> Image:
            if ref not in self.found:
                raise docker.errors.ImageNotFound(ref)
            return self.found[ref]

    class Client:
        def __init__(self, labels: object | None) -> None:
            self.images = Images({} if labels is None else {the_plan.hash_ref: Image(labels)})

    own = {plan.CONTENT_HASH_LABEL: the_plan.content_hash}
    found = executor.existing(Client(own), the_plan)  # type: ignore[arg-type]
    assert found is not None and found.cached and found.image == the_plan.hash_ref and found.size_bytes == 123
    for labels in (None, {}, {plan.CONTENT_HASH_LABEL: "0" * 64}, "x"):
        assert executor.existing(Client(labels), the_plan) is None, labels  # type: ignore[arg-type]


@pytest.mark.subprocess  # a child Python stands in for docker buildx build
def test_build_output_reaches_the_terminal_escaped_and_the_log_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    from matrixtool.build import executor
    from matrixtool.core.errors import BuildError

    printed = "setup.py: \x1b]0;owned\x07\x1b[2J\rerror: forged"
    monkeypatch.setattr(executor, "untagged", lambda argv: [sys.executable, "-c", f"print({printed!r}); exit(1)"])

    class Client:
        def info(self) -> dict[str, str]:
            return {"DockerRootDir": str(tmp_path)}

    with pytest.raises(BuildError):
        executor.execute(Client(), _plan(), work_dir=tmp_path / "work", log_dir=tmp_path / "logs")  # type: ignore[arg-type]
    err = capsys.readouterr().err
    built = [line for line in err.splitlines() if not line.startswith("+ ")]
    # a carriage return ends a line (universal newlines): each line still carries the variant's prefix
    assert built == ["[cpu] setup.py: \\x1b]0;owned\\x07\\x1b[2J", "[cpu] error: forged"], built
    assert "\x1b" not in err
    assert "\x1b]0;owned\x07\x1b[2J" in (tmp_path / "logs" / "cpu-amd64.build.log").read_text()  # the log: as printed
