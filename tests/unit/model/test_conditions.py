"""The run-condition table (conditions.ROWS): one row per condition drives keys, flags, kwargs and the schema."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest

from matrixtool.model import condition_pod, conditions, matrixfile, profile_flags, profiles
from matrixtool.model.checks import CHECKS
from matrixtool.model.conditions import ROW, ROWS, Condition
from matrixtool.model.matrixfile import SCHEMA_NAME, load_matrix
from matrixtool.model.model import CheckSpec
from matrixtool.model.profile_flags import overrides_from_flags
from matrixtool.model.profiles import Profile


def test_every_condition_is_one_row_with_its_own_key_and_flag() -> None:
    assert [r.condition for r in ROWS] == list(Condition)
    assert len({r.flag for r in ROWS}) == len(ROWS) and len({r.key for r in ROWS}) == len(ROWS)
    assert tuple(c.value for c in Condition) == profiles.KEYS


def test_the_schemas_profile_part_is_generated_from_the_rows() -> None:
    """``make docs`` (tools/docs_tables.py ``schema_text``) writes ``$defs.profile.properties`` from the rows; the
    loader and editors read that one file."""
    schema = json.loads(Path(matrixfile.__file__).with_name(SCHEMA_NAME).read_text())
    assert schema["$defs"]["profile"]["properties"] == conditions.profile_schema_properties(), (
        "matrix.schema.json's $defs.profile differs from conditions.ROWS: run `make docs`"
    )
    assert list(conditions.profile_schema_properties()) == [r.key for r in ROWS]


def test_every_condition_has_one_row_and_run_conditions_probes_each() -> None:
    assert [r.key for r in ROWS] == [c.value for c in Condition]
    assert set(CHECKS["run-conditions"].affected_by) == set(Condition)


def test_new_conditions_become_docker_kwargs() -> None:
    profile = profiles.profile_from_mapping(
        "p",
        {
            "shm_size": "1G",
            "cap_drop": ["ALL", "ALL"],
            "no_new_privileges": True,
            "seccomp": "Unconfined",
            "pids_limit": 512,
        },
    )
    assert profiles.container_kwargs(profile) == {
        "shm_size": "1g",
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true", "seccomp=unconfined"],  # two rows, one kwarg: joined
        "pids_limit": 512,
    }
    assert profile.describe() == "shm 1g, cap-drop ALL, no-new-privileges, seccomp Unconfined, pids 512"
    # RuntimeDefault is Docker's own default profile: nothing to pass (the manifest still names it).
    runtime_default = profiles.profile_from_mapping("p", {"seccomp": "RuntimeDefault"})
    assert profiles.container_kwargs(runtime_default) == {} and runtime_default.seccomp == "RuntimeDefault"


def test_the_tool_adds_no_shm_and_default_declares_what_the_server_needs() -> None:
    from matrixtool.smoke import runners as smoke_runners

    assert "shm_size" not in smoke_runners.container_kwargs("img", "s", profile=Profile(name="default"))
    for variant in load_matrix().variants:
        default = variant.profile("default")
        assert default is not None and default.shm_size == "1g", variant.name  # vLLM's CPU server: 160 MiB


def test_restricted_is_the_pod_security_standard_restricted_with_an_arbitrary_uid() -> None:
    for variant in load_matrix().variants:
        restricted = variant.profile("restricted")
        assert restricted is not None
        uid, gid = restricted.user.split(":")
        assert int(uid) > 0 and gid == "0", "PSS restricted: runAsNonRoot; OpenShift: an arbitrary UID, GID 0"
        assert restricted.cap_drop == ("ALL",) and restricted.no_new_privileges
        assert restricted.seccomp == "RuntimeDefault" and restricted.pids_limit
        assert restricted.read_only and "/tmp" in restricted.tmpfs and restricted.shm_size


def test_a_profile_changing_only_a_new_condition_still_proves_it() -> None:
    checks = [CheckSpec(name=n, timeout=1) for n in CHECKS]
    affects = {n: frozenset(map(Condition, c.affected_by)) for n, c in CHECKS.items()}
    default = profiles.profile_from_mapping("default", {"shm_size": "1g"})
    pids = profiles.profile_from_mapping("pids", {"shm_size": "1g", "pids_limit": 64})
    assert pids.differs(default) == {Condition.PIDS_LIMIT}
    run, _ = profiles.checks_to_run(pids, default, checks, affects)
    assert "run-conditions" in [c.name for c in run]


def test_flags_are_made_from_the_table_and_parsed_by_its_rules() -> None:
    @click.command()
    @profile_flags.options(())
    def cmd(**kw: object) -> None:
        pass

    names = {o for p in cmd.params for o in p.opts + p.secondary_opts}
    assert {r.flag for r in ROWS} <= names and {r.flag_off for r in ROWS if r.flag_off} <= names
    flags = {r.key: None for r in ROWS} | {"tmpfs": (), "env": (), "cap_drop": ()}
    got = overrides_from_flags(flags | {"shm_size": "2G", "cap_drop": ("ALL",), "pids_limit": "64"})
    assert got == profiles.Overrides.of(shm_size="2g", cap_drop=("ALL",), pids_limit=64)


def test_kubernetes_quantities() -> None:
    assert [condition_pod.quantity(s) for s in ("4g", "512m", "100k", "123", "7b")] == [
        "4Gi",
        "512Mi",
        "100Ki",
        "123",
        "7",
    ]


def test_the_markdown_table_has_a_line_per_row() -> None:
    text = conditions.markdown_table({Condition.SHM_SIZE: ["serve"]})
    assert len(text.splitlines()) == 2 + len(ROWS) and "`--shm-size SIZE`" in text and "`serve`" in text


@pytest.mark.parametrize(
    ("condition", "value", "normal"),
    [
        (Condition.USER, "4294967294:0", "4294967294:0"),
        (Condition.CPUS, 0.01, 0.01),
        (Condition.CPUS, "8192", 8192.0),
        (Condition.MEMORY, "6m", "6m"),
        (
            Condition.TMPFS,
            {"/var/cache": "rw,exec,size=10%,mode=1777,uid=0"},
            {"/var/cache": "rw,exec,size=10%,mode=1777,uid=0"},
        ),
        (Condition.NETWORK, "container:abc", "container:abc"),
        (Condition.ENV, {"a_b": 1}, {"a_b": "1"}),
        (Condition.PIDS_LIMIT, 4194304, 4194304),
    ],
)
def test_bounds_that_are_accepted(condition: Condition, value: object, normal: object) -> None:
    assert conditions.parse_value(ROW[condition], value) == normal


def test_the_open_files_limit_is_a_condition_docker_sets_and_a_pod_can_only_annotate() -> None:
    """Failure class 41's run condition: ``--ulimit nofile=N:N`` for Docker; no Pod field (an annotation)."""
    profile = profiles.profile_from_mapping("p", {"nofile": "1024"})
    assert profiles.container_kwargs(profile) == {"ulimits": [{"name": "nofile", "soft": 1024, "hard": 1024}]}
    assert profile.describe() == "nofile 1024"
    parts = condition_pod.PodParts()
    ROW[Condition.NOFILE].pod(parts, 1024)
    assert parts.annotations == {condition_pod.NOFILE_LIMIT_ANNOTATION: "1024"}
    assert ROW[Condition.NOFILE].from_pod(parts) == 1024
    for bad in (0, 15, 2**20 + 1, True, "1k"):
        with pytest.raises(ValueError, match="from 16 to 1048576"):
            conditions.parse_value(ROW[Condition.NOFILE], bad)
