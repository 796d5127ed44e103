#!/usr/bin/env bash
# Installs the real SQL clients the tests drive against `strata serve`
# (services/strata/tests/clients.rs), pinned, and prints the variables that point the tests
# at them (ci/test.sh evals the output):
#   - Python: pyarrow and the ADBC Flight SQL driver (ci/clients-requirements.txt), in a
#     virtualenv under $STRATA_CACHE: STRATA_CLIENT_PYTHON;
#   - Java: the Arrow Flight SQL JDBC driver from Maven Central (one shaded jar):
#     STRATA_CLIENT_FLIGHT_JDBC.
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/env.sh
venv="$STRATA_CACHE/clients-venv"
if [ ! -x "$venv/bin/python" ]; then python3 -m venv "$venv" >&2; fi
"$venv/bin/pip" install -q --disable-pip-version-check -r ci/clients-requirements.txt >&2
echo "export STRATA_CLIENT_PYTHON='$venv/bin/python'"

flight_jdbc_version=18.3.0
repo="${MAVEN_REPO:-$HOME/.m2/repository}"
jar="$repo/org/apache/arrow/flight-sql-jdbc-driver/$flight_jdbc_version/flight-sql-jdbc-driver-$flight_jdbc_version.jar"
if [ ! -f "$jar" ]; then
  mvn -q dependency:get -Dtransitive=false \
    -Dartifact="org.apache.arrow:flight-sql-jdbc-driver:$flight_jdbc_version" >&2
fi
echo "export STRATA_CLIENT_FLIGHT_JDBC='$jar'"
