#!/usr/bin/env bash
# Builds the separate environment that benchmarks/drift_mmd.py runs alibi-detect in.
# alibi-detect 0.13 pins numpy<2 and transformers<5, so it cannot share the project's venv;
# it is also under the Business Source License 1.1: a benchmark baseline, never a dependency.
# Usage: benchmarks/alibi_env.sh [VENV_DIR]   (default /tmp/alibi-venv, or $ALIBI_VENV)
set -euo pipefail
venv="${1:-${ALIBI_VENV:-/tmp/alibi-venv}}"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import alibi_detect" 2>/dev/null; then
  echo "$venv"; exit 0
fi
python3 -m venv "$venv"
# torch first, pinned: a local CPU wheel; any other version would pull CUDA builds.
"$venv/bin/pip" install -q torch==2.13.0
# numpy 1.x with pyarrow 26 breaks imports further down alibi's dependency tree.
"$venv/bin/pip" install -q alibi-detect 'pyarrow<26'
"$venv/bin/python" -c "import alibi_detect, torch; print('alibi-detect', alibi_detect.__version__, 'torch', torch.__version__)" >&2
echo "$venv"
