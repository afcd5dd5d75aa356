"""Stand-in for actions/download-artifact (v4+ protocol) against act's own artifact server: list the run's
artifacts (ListArtifacts), keep the one ``name`` names or those ``pattern`` matches, fetch each zip
(GetSignedArtifactURL) and extract it, as the real action does. Standard library only; run by action.yml.

As the real action: a ``name`` not found is an error; a ``pattern`` that matches nothing downloads nothing and
succeeds. Each artifact goes to ``path/<name>/`` when several may match, into ``path`` itself with
``merge-multiple`` or a single ``name``."""

from __future__ import annotations

import base64
import fnmatch
import io
import json
import os
import sys
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

SERVICE = "twirp/github.actions.results.api.v1.ArtifactService"


def backend_ids() -> tuple[str, str]:
    """The run and job ids the runtime token's scope names (``Actions.Results:RUN:JOB``)."""
    payload = os.environ["ACTIONS_RUNTIME_TOKEN"].split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    scope = next(s for s in claims["scp"].split() if s.startswith("Actions.Results:"))
    _, run, job = scope.split(":")
    return run, job


def call(method: str, body: dict[str, object]) -> dict[str, object]:
    url = os.environ["ACTIONS_RESULTS_URL"].rstrip("/") + f"/{SERVICE}/{method}"
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return dict(json.load(answer))


def main() -> int:
    name, pattern = os.environ.get("INPUT_NAME", ""), os.environ.get("INPUT_PATTERN", "")
    merge = os.environ.get("INPUT_MERGE_MULTIPLE", "false") == "true"
    dest = Path(os.path.expanduser(os.environ.get("INPUT_PATH") or os.environ["GITHUB_WORKSPACE"]))
    run, job = backend_ids()
    try:
        listed = call("ListArtifacts", {"workflow_run_backend_id": run, "workflow_job_run_backend_id": job})
    except OSError:  # an HTTP error or a dropped connection
        listed = {}  # act's server fails the request while the run has no artifact at all
    names = sorted(str(a["name"]) for a in listed.get("artifacts", []))  # type: ignore[attr-defined]
    if name:
        if name not in names:
            print(f"::error::Unable to download artifact(s): Artifact not found for name: {name}")
            print(f"Artifacts of this run on act's server: {', '.join(names) or 'none'}")
            return 1
        chosen, single = [name], True
    else:
        chosen = [n for n in names if not pattern or fnmatch.fnmatchcase(n, pattern)]
        single = False
        if pattern:
            listed_names = ", ".join(names) or "none"
            print(f"Filtering artifacts by pattern '{pattern}': {len(chosen)} of {len(names)} ({listed_names})")
    for artifact in chosen:
        signed = call(
            "GetSignedArtifactURL",
            {"workflow_run_backend_id": run, "workflow_job_run_backend_id": job, "name": artifact},
        )
        with urllib.request.urlopen(str(signed["signedUrl"]), timeout=300) as answer:
            data = answer.read()
        target = dest if single or merge else dest / artifact
        target.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for member in archive.namelist():
                if member.startswith("/") or ".." in Path(member).parts:
                    print(f"::error::artifact {artifact} holds an unsafe path: {member}")
                    return 1
            archive.extractall(target)
        print(f"Artifact {artifact} downloaded to {target}")
    print(f"Total of {len(chosen)} artifact(s) downloaded")
    with open(os.environ["GITHUB_OUTPUT"], "a") as out:
        out.write(f"download-path={dest}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
