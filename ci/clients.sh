#!/usr/bin/env bash
# Installs the real SQL clients the tests drive against `strata serve`
# (services/strata/tests/clients.rs), pinned, and prints the variables that point the tests
# at them (ci/test.sh evals the output):
#   - Python: pyarrow and the ADBC Flight SQL driver (ci/clients-requirements.txt), in a
#     virtualenv under $STRATA_CACHE: STRATA_CLIENT_PYTHON;
#   - Python: psycopg 3, SQLAlchemy and pandas for the PostgreSQL port (same virtualenv);
#   - Java: the Arrow Flight SQL JDBC driver from Maven Central (one shaded jar):
#     STRATA_CLIENT_FLIGHT_JDBC; the PostgreSQL JDBC driver: STRATA_CLIENT_PG_JDBC;
#   - psql, Debian's PostgreSQL client (postgresql-client-15): STRATA_CLIENT_PSQL.
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

pg_jdbc_version=42.7.14
pg_jar="$repo/org/postgresql/postgresql/$pg_jdbc_version/postgresql-$pg_jdbc_version.jar"
if [ ! -f "$pg_jar" ]; then
  mvn -q dependency:get -Dtransitive=false \
    -Dartifact="org.postgresql:postgresql:$pg_jdbc_version" >&2
fi
echo "export STRATA_CLIENT_PG_JDBC='$pg_jar'"

# psql pinned to its major version (Debian's package name carries it; the minor follows
# Debian's security updates, which the mirror keeps only the latest of).
psql_major=15
psql_bin="/usr/lib/postgresql/$psql_major/bin/psql"
if [ ! -x "$psql_bin" ]; then
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "postgresql-client-$psql_major" >&2
fi
echo "export STRATA_CLIENT_PSQL='$psql_bin'"
