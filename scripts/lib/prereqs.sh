# shellcheck shell=bash
# The tools the scripts need from the machine, checked before they are used (sourced by
# scripts/bootstrap, scripts/start, scripts/web, scripts/cluster, scripts/objectstore and
# scripts/cluster.d/build.sh).
#
# check_python, check_node and check_go print nothing and return 0 when the tool is there
# and new enough; otherwise they print one sentence (what is missing or too old, the
# version found, what to install) and return 1. `require CHECK` turns that sentence into
# the calling script's one-line error and exits. Only bash builtins and the checked tools
# themselves are run, so that tests can put stand-ins for them alone on PATH.

PREREQS_ROOT="$(cd "${BASH_SOURCE[0]%/*}/../.." && pwd)"
PYTHON_MIN=3.11
# The range of web/package-lock.json's node_modules/vite "engines" (tests/project/test_prereqs.py
# keeps the two equal): each alternative is ^X.Y.Z (same major) or >=X.Y.Z.
VITE_NODE_RANGE="^20.19.0 || >=22.12.0"
GO_DOWNLOAD="https://go.dev/dl/"
NODE_DOWNLOAD="https://nodejs.org/en/download"

# version_at_least HAVE MIN: dotted numeric versions; a missing part counts as 0.
version_at_least() {
  local -a have want
  local i
  IFS=. read -ra have <<<"$1"
  IFS=. read -ra want <<<"$2"
  for ((i = 0; i < ${#want[@]}; i++)); do
    ((10#${have[i]:-0} > 10#${want[i]})) && return 0
    ((10#${have[i]:-0} < 10#${want[i]})) && return 1
  done
  return 0
}

# in_node_range VERSION RANGE: VERSION (X.Y.Z) satisfies one of RANGE's alternatives.
in_node_range() {
  local alternative floor
  local -a alternatives
  IFS='|' read -ra alternatives <<<"${2//||/|}"
  for alternative in "${alternatives[@]}"; do
    alternative="${alternative// /}"
    case "$alternative" in
      '^'*) floor="${alternative:1}"
            [[ "${1%%.*}" == "${floor%%.*}" ]] && version_at_least "$1" "$floor" && return 0 ;;
      '>='*) version_at_least "$1" "${alternative:2}" && return 0 ;;
    esac
  done
  return 1
}

# first_line CMD...: the first line CMD prints (a broken tool may print a screenful), and
# no failure: what it printed is judged instead.
first_line() {
  local out
  out="$("$@" 2>&1)" || true
  printf '%s' "${out%%$'\n'*}"
}

check_python() {
  if ! command -v python3 >/dev/null; then
    echo "python3 not found; Crucible needs Python >= $PYTHON_MIN with its venv module: apt-get install python3 python3-venv (Debian 12's python3 is 3.11)"
    return 1
  fi
  local have series package where
  have="$(first_line python3 --version)"
  have="${have#Python }"
  [[ "$have" =~ ^[0-9]+\.[0-9]+ ]] && series="${BASH_REMATCH[0]}"
  if [[ -z "${series:-}" ]] || ! version_at_least "$series" "$PYTHON_MIN"; then
    echo "python3 is ${have:-unknown}; Crucible needs Python >= $PYTHON_MIN: install Python 3.11 or newer (Debian 12's python3 is 3.11) and put it first on PATH as python3"
    return 1
  fi
  python3 -c 'import ensurepip, venv' 2>/dev/null && return 0
  # Debian leaves ensurepip out of its python3.X packages (python3 -m venv then fails, after
  # making a .venv without pip); its python3.X-venv package has it.
  package="python$series-venv"
  where="$(command -v python3)"
  if ! dpkg -S "$where" >/dev/null 2>&1; then
    echo "python3 $have ($where, not Debian's) has no ensurepip module, which python3 -m venv needs: reinstall it with ensurepip, or use Debian's (apt-get install python3 $package)"
    return 1
  fi
  if ((EUID == 0)) && command -v apt-get >/dev/null; then
    echo "${0##*/}: installing Debian's $package (python3 -m venv needs its ensurepip)" >&2
    local apt=(apt-get -o DPkg::Lock::Timeout=300)
    { "${apt[@]}" update -qq && DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq "$package"; } >&2 || true
    python3 -c 'import ensurepip, venv' 2>/dev/null && return 0
  fi
  echo "python3 $have has no ensurepip module, which python3 -m venv needs: apt-get install $package"
  return 1
}

check_node() {
  if ! command -v node >/dev/null; then
    echo "node not found; the dashboard's Vite 7 needs Node $VITE_NODE_RANGE (Debian 12's nodejs is 18, too old): install Node 22 LTS from $NODE_DOWNLOAD (or NodeSource's packages)"
    return 1
  fi
  local have
  have="$(first_line node --version)"
  have="${have#v}"
  if ! [[ "$have" =~ ^[0-9]+\.[0-9]+\.[0-9]+ ]] || ! in_node_range "${BASH_REMATCH[0]}" "$VITE_NODE_RANGE"; then
    echo "node is ${have:-unknown}; the dashboard's Vite 7 needs Node $VITE_NODE_RANGE (Debian 12's nodejs is 18, too old): install Node 22 LTS from $NODE_DOWNLOAD (or NodeSource's packages)"
    return 1
  fi
  if ! command -v npm >/dev/null; then
    echo "npm not found beside node $have: install the npm that comes with Node from $NODE_DOWNLOAD (or NodeSource's nodejs package)"
    return 1
  fi
}

# The newest `go` directive of the modules scripts/cluster.d builds: with GOTOOLCHAIN=local,
# a Go older than any module's directive refuses to build it rather than fetch a toolchain.
# (kwok, helm and coredns, installed by version, ask for no newer Go; see versions.env.)
go_minimum() {
  local mod key value best=0
  for mod in "$PREREQS_ROOT"/scripts/cluster.d/*/go.mod; do
    [[ -f "$mod" ]] || continue
    while read -r key value _; do
      if [[ "$key" == go ]] && version_at_least "$value" "$best"; then best="$value"; fi
    done <"$mod"
  done
  printf '%s' "$best"
}

check_go() {
  local want have
  want="$(go_minimum)"
  if ! command -v go >/dev/null; then
    echo "go not found; building the test cluster and S3 server from Go modules needs Go >= $want (Debian 12's golang-go is 1.19, too old): install it from $GO_DOWNLOAD and put its bin on PATH"
    return 1
  fi
  have="$(GOTOOLCHAIN=local first_line go env GOVERSION)"
  if ! [[ "$have" =~ ^go([0-9]+\.[0-9]+(\.[0-9]+)?) ]] || ! version_at_least "${BASH_REMATCH[1]}" "$want"; then
    echo "go is ${have:-unknown}; building the test cluster and S3 server from Go modules needs Go >= $want (Debian 12's golang-go is 1.19, too old): install it from $GO_DOWNLOAD and put its bin on PATH"
    return 1
  fi
}

# require CHECK: CHECK's sentence as this script's error, then exit 1.
require() {
  local why
  why="$("$1")" && return 0
  printf '%s: %s\n' "${0##*/}" "$why" >&2
  exit 1
}
