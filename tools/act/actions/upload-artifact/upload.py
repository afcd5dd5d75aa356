"""Stand-in for actions/upload-artifact (v4+ protocol) against act's own artifact server: zip the files of
``path`` and send them through the results service's twirp API (CreateArtifact, the blob PUT, FinalizeArtifact),
as the real action does. Standard library only; run by action.yml with the inputs in the environment.

Errors print a GitHub workflow command (``::error::``) and exit 1, as the real action's messages do."""

from __future__ import annotations

import base64
import glob
import hashlib
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


def search(lines: list[str], hidden: bool) -> tuple[list[Path], Path | None]:
    """The files the ``path`` input names (directories recursively, globs expanded) and the root of the zip:
    the deepest folder common to every search path, as the real action's least common ancestor."""
    files: list[Path] = []
    roots: list[Path] = []
    for line in lines:
        pattern = os.path.expanduser(line)
        if pattern.startswith("!"):
            print(f"::error::exclude patterns ({line}) are not supported by the local stand-in")
            sys.exit(1)
        base = Path(pattern.split("*")[0].split("?")[0] or ".")
        roots.append(base if "*" in pattern or "?" in pattern or base.is_dir() else base.parent)
        for hit in sorted(glob.glob(pattern, recursive=True)):
            found = [Path(hit)] if Path(hit).is_file() else sorted(p for p in Path(hit).rglob("*") if p.is_file())
            files += [f for f in found if hidden or not any(part.startswith(".") for part in f.parts)]
    if not files:
        return [], None
    root = Path(os.path.commonpath([str(r.absolute()) for r in roots]))
    return sorted(set(files)), root


def main() -> int:
    name = os.environ["INPUT_NAME"] or "artifact"
    lines = [x.strip() for x in os.environ["INPUT_PATH"].splitlines() if x.strip()]
    hidden = os.environ.get("INPUT_INCLUDE_HIDDEN_FILES", "false") == "true"
    files, root = search(lines, hidden)
    if not files or root is None:
        message = f"No files were found with the provided path: {' '.join(lines)}. No artifacts will be uploaded."
        mode = os.environ.get("INPUT_IF_NO_FILES_FOUND", "warn")
        if mode == "error":
            print(f"::error::{message}")
            return 1
        print(f"::warning::{message}" if mode == "warn" else message)
        return 0
    run, job = backend_ids()
    try:
        listed = call(
            "ListArtifacts", {"workflow_run_backend_id": run, "workflow_job_run_backend_id": job, "name_filter": name}
        )
    except OSError:  # an HTTP error or a dropped connection
        listed = {}  # act's server fails the request while the run has no artifact yet
    if listed.get("artifacts") and os.environ.get("INPUT_OVERWRITE", "false") != "true":
        print(
            f"::error::Failed to CreateArtifact: an artifact with this name already exists on the workflow run: {name}"
        )
        return 1
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for f in files:
            archive.write(f, f.absolute().relative_to(root).as_posix())
    data = buffer.getvalue()
    created = call(
        "CreateArtifact",
        {"workflow_run_backend_id": run, "workflow_job_run_backend_id": job, "name": name, "version": 4},
    )
    put = urllib.request.Request(
        f"{created['signedUploadUrl']}&comp=block",
        data,
        method="PUT",
        headers={"Content-Type": "application/zip", "x-ms-blob-type": "BlockBlob"},
    )
    urllib.request.urlopen(put, timeout=300).close()
    digest = hashlib.sha256(data).hexdigest()
    done = call(
        "FinalizeArtifact",
        {
            "workflow_run_backend_id": run,
            "workflow_job_run_backend_id": job,
            "name": name,
            "size": str(len(data)),
            "hash": f"sha256:{digest}",
        },
    )
    print(
        f"Artifact {name} ({len(files)} files, {len(data)} bytes zipped) uploaded to act's artifact server, "
        f"id {done.get('artifactId')}"
    )
    with open(os.environ["GITHUB_OUTPUT"], "a") as out:
        out.write(
            f"artifact-id={done.get('artifactId')}\nartifact-digest={digest}\n"
            f"artifact-url=act-artifact-server://{run}/{name}\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
