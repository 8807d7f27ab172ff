"""Reads and slices scripts/images' OCI layout (stdlib only; run by the host's python3).

oci.py digest LAYOUT TAG          the manifest digest of TAG
oci.py single LAYOUT TAG REF OUT  OUT/: a layout holding only TAG, named REF for
                                  containerd, its blobs links into LAYOUT (for `ctr import`)
"""

import json
import sys
from pathlib import Path

REF_NAME = "org.opencontainers.image.ref.name"
CONTAINERD_NAME = "io.containerd.image.name"


def manifest_of(layout: Path, tag: str) -> dict:
    index = json.loads((layout / "index.json").read_text())
    for entry in index["manifests"]:
        if entry.get("annotations", {}).get(REF_NAME) == tag:
            return entry
    sys.exit(f"oci.py: no tag {tag!r} in {layout}; run scripts/images build")


def blob(layout: Path, digest: str) -> Path:
    algorithm, hexdigest = digest.split(":", 1)
    return layout / "blobs" / algorithm / hexdigest


def single(layout: Path, tag: str, ref: str, out: Path) -> None:
    entry = dict(manifest_of(layout, tag))
    entry["annotations"] = {**entry.get("annotations", {}), CONTAINERD_NAME: ref}
    manifest = json.loads(blob(layout, entry["digest"]).read_text())
    needed = [entry["digest"], manifest["config"]["digest"]]
    needed += [layer["digest"] for layer in manifest["layers"]]
    for digest in needed:
        target = blob(out, digest)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(blob(layout, digest))
    (out / "oci-layout").write_text((layout / "oci-layout").read_text())
    (out / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [entry]}))


if __name__ == "__main__":
    command, layout, tag, *rest = sys.argv[1:]
    if command == "digest":
        print(manifest_of(Path(layout), tag)["digest"])
    elif command == "single":
        single(Path(layout), tag, rest[0], Path(rest[1]))
    else:
        sys.exit(f"oci.py: unknown command {command!r}")
