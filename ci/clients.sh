#!/usr/bin/env bash
# Installs the real SQL clients the tests use (ci/clients-requirements.txt, pinned) into a
# virtualenv under $STRATA_CACHE and prints its Python: ci/test.sh exports it as
# STRATA_CLIENT_PYTHON for services/strata/tests/clients.rs.
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/env.sh
venv="$STRATA_CACHE/clients-venv"
if [ ! -x "$venv/bin/python" ]; then python3 -m venv "$venv" >&2; fi
"$venv/bin/pip" install -q --disable-pip-version-check -r ci/clients-requirements.txt >&2
echo "$venv/bin/python"
