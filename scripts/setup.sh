#!/usr/bin/env bash
# Set up diageval on this machine, for whichever python3 is first on PATH (a virtual environment's, when one
# is active): the README's first command and .ci/run both start here.
#   bash scripts/setup.sh [EXTRAS]      e.g. bash scripts/setup.sh hta   or   bash scripts/setup.sh test,hta,llm
# 1. bubblewrap, the diagnosers' sandbox (diageval runs no diagnoser without it), from Debian/Ubuntu's
#    packages when it is missing (as root, or through sudo);
# 2. torch: kept when one is installed (a GPU machine brings its own CUDA build), else the CPU build 2.13.0;
# 3. diageval itself, editable, with EXTRAS.
# pip's own output is shown only when it fails (this machine's pip configuration warns once per package).
# pip installs without byte-compiling (--no-compile) and the packages are compiled at the end on every core
# (compileall -j 0): pip compiles one file at a time, ~95 s of one core in CI's set-up for torch, ray and the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
quiet() { "$@" >"$log" 2>&1 || { cat "$log"; echo "setup: failed: $*" >&2; exit 1; }; }

if ! command -v bwrap >/dev/null; then
  echo "installing bubblewrap (Debian package), the diagnosers' sandbox"
  if [ "$(id -u)" = 0 ]; then sudo_=""; elif command -v sudo >/dev/null; then sudo_="sudo"; else
    echo "setup: bubblewrap is missing and this user cannot install it: ask for the Debian/Ubuntu package 'bubblewrap'" >&2
    exit 1
  fi
  quiet $sudo_ apt-get update -qq
  quiet env DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq bubblewrap
fi
if python3 -c "import torch" >/dev/null 2>&1; then
  echo "torch $(python3 -c 'import torch; print(torch.__version__)') is installed: kept"
else
  echo "installing torch==2.13.0 (CPU build; on a GPU machine install your own build first)"
  quiet python3 -m pip install --disable-pip-version-check --no-compile torch==2.13.0
fi
# The otava extra is installed without its dependencies: apache-otava pins numpy 2.2 and scipy < 1.17 and pulls
# BigQuery, Postgres and Slack clients, while the adapter imports only otava.analysis (numpy and scipy, which
# diageval's own dependencies bring). Asking pip for the extra would downgrade numpy under torch.
otava=""
case ",$extras," in *,otava,*) otava=1; extras=$(echo ",$extras," | sed 's/,otava,/,/; s/^,//; s/,$//') ;; esac
echo "installing diageval${extras:+[$extras]} into $(python3 -c 'import sys; print(sys.prefix)')"
quiet python3 -m pip install --disable-pip-version-check --no-compile -e ".${extras:+[$extras]}"
if [ -n "$otava" ]; then
  echo "installing apache-otava (the otava diagnoser's change-point analysis; without its cloud clients)"
  quiet python3 -m pip install --disable-pip-version-check --no-compile --no-deps "apache-otava>=0.8"
fi
# nvidia-resiliency-ext (the nvrx extra) pulls the deprecated `pynvml` shim, which makes every `import torch` warn;
# nvidia-ml-py, pulled beside it, provides the same module.
if python3 -m pip show -q pynvml >/dev/null 2>&1 && python3 -m pip show -q nvidia-ml-py >/dev/null 2>&1; then
  quiet python3 -m pip uninstall -y pynvml
fi
# Byte-compile what pip installed, as pip would have, on every core. Like pip, a file that does not compile is
# left as it is (torch ships test helpers in Python 3.12 syntax); files already compiled are skipped.
echo "byte-compiling the installed packages"
quiet python3 - <<'PY'
import compileall, sysconfig
for folder in sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}):
    try:  # its False (a file did not compile) is not a failure
        compileall.compile_dir(folder, quiet=2, workers=0)
    except OSError:  # no process pool here (a container without /dev/shm's semaphores): one core, as pip does
        compileall.compile_dir(folder, quiet=2)
PY
