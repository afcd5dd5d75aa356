"""Pure logic of the engine probes (no engine needed)."""

from __future__ import annotations


def test_qemu_major_is_read_from_its_version_line() -> None:
    from matrixtool.core.engine import QEMU_MIN_MAJOR, qemu_major

    assert qemu_major("qemu-aarch64 version 10.0.13 (Debian 1:10.0.13+ds-0+deb13u1)") == 10
    assert qemu_major("qemu-aarch64 version 7.2.0 (Debian 1:7.2+dfsg-7+deb12u18)") == 7 < QEMU_MIN_MAJOR
    assert qemu_major("") is None


def test_buildx_losing_the_engine_is_read_from_its_own_error_line_only() -> None:
    from matrixtool.core.engine import lost_line

    eof = "ERROR: failed to receive status: rpc error: code = Unavailable desc = error reading from server: EOF"
    assert lost_line(["#6 [base 2/3] RUN apt-get update", eof]) == eof
    # A build step that prints a gRPC error is the step's failure, not the engine's.
    step = "#9 12.3 grpc: code = Unavailable desc = transport is closing"
    assert lost_line([step, "ERROR: failed to solve: process did not complete successfully: exit code: 1"]) is None


def test_a_full_disk_is_read_from_buildkit_or_a_build_step() -> None:
    from matrixtool.core.engine import no_space_line

    kit = "ERROR: failed to solve: write /d/overlay2/x/diff/wheelhouse/torch.whl: no space left on device"
    assert no_space_line(["#4 transferring context: 62.80MB", kit, "------"]) == kit
    pip = "#9 41.2 OSError: [Errno 28] No space left on device"
    assert no_space_line([pip, "ERROR: failed to solve: exit code: 1"]) == pip
    assert no_space_line(["ERROR: failed to solve: exit code: 1"]) is None


def test_the_gone_message_names_the_engine() -> None:
    from matrixtool.core.engine import DEFAULT_HOST, gone_message

    assert gone_message({}, "the run", "x").startswith(
        f"the Docker engine at {DEFAULT_HOST} went away during the run: x"
    )
    assert "unix:///tmp/d.sock" in gone_message({"DOCKER_HOST": "unix:///tmp/d.sock"}, "the run", "x")
