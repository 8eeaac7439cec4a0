#!/bin/sh
# The tools `make setup` runs, checked before it creates anything: the first one missing or too
# old stops it with one line naming it and how to install it (Debian package names).
#
#   deploy/local/check-prereqs.sh [PYTHON]     # PYTHON: the interpreter for the venv (python3)
#
# Python >= 3.11 with venv   the venv and pinned packages
# JDK >= 17 (javac, java)    the scenarios' Java driver (javac --release 17); Kafka and Spark run on it
# Maven (mvn)                the Kafka broker, Spark connector and Java client jars
# Go >= 1.26                 the Sarama and franz-go scenario clients (go.mod, no toolchain download)
# Node.js >= 18 with npm     the KafkaJS scenario client (package.json engines, npm ci)
# prometheus, promtool, prometheus-alertmanager, amtool: installed by setup with apt-get as root
set -u

PYTHON=${1:-python3}

fail() {
    echo "setup: $1" >&2
    exit 1
}

# at_least HAVE WANT: true when the dotted version HAVE is WANT or newer.
at_least() {
    awk -v have="$1" -v want="$2" 'BEGIN {
        n = split(have, h, "."); split(want, w, ".")
        for (i = 1; i <= 3; i++) {
            a = h[i] + 0; b = w[i] + 0
            if (a > b) exit 0
            if (a < b) exit 1
        }
        exit 0
    }'
}

# need WHAT COMMAND HINT: COMMAND must be on PATH.
need() {
    command -v "$2" >/dev/null 2>&1 || fail "$1 is needed ($2 not found on PATH): install it, e.g. $3"
}

# Python, with the venv module (Debian ships it apart, as python3-venv).
need "Python >= 3.11" "$PYTHON" "apt-get install python3 python3-venv"
v=$("$PYTHON" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null) ||
    fail "Python >= 3.11 is needed ($PYTHON does not run): install it, e.g. apt-get install python3"
at_least "$v" 3.11 ||
    fail "Python >= 3.11 is needed ($PYTHON is $v): install it, e.g. apt-get install python3"
"$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1 ||
    fail "Python's venv module is needed ($PYTHON -m venv cannot work): install it, e.g. apt-get install python3-venv"

# A JDK: javac for the Java driver, java for the broker and Spark.
need "a JDK >= 17" javac "apt-get install openjdk-17-jdk-headless"
need "a JDK >= 17" java "apt-get install openjdk-17-jdk-headless"
v=$(javac -version 2>&1)
v=${v#javac }
at_least "$v" 17 ||
    fail "a JDK >= 17 is needed (javac $v found): install it, e.g. apt-get install openjdk-17-jdk-headless"

need "Maven" mvn "apt-get install maven"

need "Go >= 1.26" go "Go's release tarball unpacked in /usr/local/go, with /usr/local/go/bin on PATH"
v=$(go version 2>/dev/null)
v=${v#go version go}
v=${v%% *}
at_least "$v" 1.26 ||
    fail "Go >= 1.26 is needed (go $v found): install it, e.g. Go's release tarball unpacked in /usr/local/go"

need "Node.js >= 18" node "apt-get install nodejs npm"
v=$(node --version 2>/dev/null)
v=${v#v}
at_least "$v" 18 || fail "Node.js >= 18 is needed (node $v found): install it, e.g. apt-get install nodejs"
need "npm" npm "apt-get install npm"

# Prometheus and Alertmanager: setup installs Debian's packages when it runs as root.
for tool in prometheus promtool prometheus-alertmanager amtool; do
    if ! command -v "$tool" >/dev/null 2>&1 && [ ! -e "/usr/bin/$tool" ] && [ "$(id -u)" != 0 ]; then
        fail "$tool is needed (not found, and only root can have setup install it): install it, e.g. apt-get install prometheus prometheus-alertmanager"
    fi
done
exit 0
