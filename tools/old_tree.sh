#!/usr/bin/env bash
# Lay out revision REV of this checkout in DIR (default .old, git-ignored) as an importable
# fp8gemm, for A/B runs against the working tree in one device call: the old tree with
# `PYTHONPATH=$PWD/.old python3 ...`, the new one without, each from outside the checkout (e.g.
# `cd /tmp`), so that the editable install does not shadow it. On the device machine, name DIR in
# the call's carry. Example: tools/old_tree.sh main~3 && (cd /tmp && PYTHONPATH=$OLDPWD/.old
# python3 $OLDPWD/lab/ab_configs.py old.json && python3 $OLDPWD/lab/ab_configs.py new.json)
set -euo pipefail
rev=${1:?usage: tools/old_tree.sh REV [DIR]}
dir=${2:-.old}
rm -rf "$dir"
mkdir -p "$dir"
git archive "$rev" | tar -x -C "$dir"
# the installed package maps these top-level folders into fp8gemm/ (pyproject.toml package-dir)
for p in dispatch kernels_cu bench; do cp -r "$dir/$p" "$dir/fp8gemm/$p"; done
echo "$(git rev-parse --short "$rev") -> $dir"
