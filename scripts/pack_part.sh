#!/usr/bin/env bash
# pack_part.sh OUT DEST: copy a published folder as plain files, for a CI artifact upload.
# OUT is a link to its current generation (pipeline/publishing/publish.py); artifact uploads and zips do not
# keep symlinks reliably, so DEST gets what OUT holds as plain files (cp -L), and none of the
# state beside OUT. .cache/report (saved runtime outputs, for the merged report's
# maps) and .cache/export (the .pt2) come along; `invoke merge` reads both when present.
set -euo pipefail
src=$1
dest=$2
[ -f "$src/manifest.json" ] || { echo "pack_part: no manifest.json in $src (run invoke build first)" >&2; exit 2; }
rm -rf "$dest"
mkdir -p "$dest"
for path in "$src"/*; do  # the glob skips hidden names: .cache is added below
    cp -RL "$path" "$dest/"
done
for cache in report export; do
    if [ -d "$src/.cache/$cache" ]; then
        mkdir -p "$dest/.cache"
        cp -R "$src/.cache/$cache" "$dest/.cache/"
    fi
done
echo "pack_part: $src -> $dest ($(find "$dest" -type f | wc -l) files, no symlinks)"
