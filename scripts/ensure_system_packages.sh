#!/usr/bin/env bash
# Installs the Debian packages specbench needs and lacks; `make run` and `make test` call it first. When
# everything is installed it prints nothing and returns at once (one dpkg-query call). The packages:
#   - the speech synthesizers and voices, and sox: those of cluster/install-speech-packages.sh;
#   - cmake, g++, make, Boost and compression headers: KenLM's lmplz and query are compiled from source
#     (platform/specbench/wfst/kenlm_tools.py);
#   - iproute2 (network-namespace cluster tests), git, chromium and chromium-driver (the browser test);
#   - python3 and python3-venv (.venv; a failed venv without pip is made again by the Makefile).
# Missing ones are installed through cluster/install-speech-packages.sh (it enables Debian's contrib and
# non-free components for MBROLA), as root, or through `sudo -n` when sudo works without a password.
# Otherwise it prints the one command to run and exits 1.
#
#   scripts/ensure_system_packages.sh           check, and install what is missing
#   scripts/ensure_system_packages.sh --check   only say what is missing (exit 1 if anything is)
#
# Environment: SPECBENCH_SKIP_SYSTEM_PACKAGES=1 skips the check (the packages come another way);
# SPECBENCH_ASSUME_MISSING="PKG ..." counts these packages as missing too, and SPECBENCH_SUDO names the sudo
# program (default sudo): the tests of this script use both.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
INSTALLER="$ROOT/cluster/install-speech-packages.sh"
# what cluster/install-speech-packages.sh installs (tests/unit/test_system_packages.py keeps the two equal)
SPEECH_PACKAGES=(espeak-ng libespeak-ng1 flite festival festvox-us-slt-hts festvox-kdlpc16k sox
  mbrola mbrola-us1 mbrola-us2 mbrola-us3 mbrola-en1)
# passed to it as extra packages
OTHER_PACKAGES=(cmake g++ make libboost-program-options-dev libboost-system-dev libboost-thread-dev
  libboost-test-dev zlib1g-dev libbz2-dev liblzma-dev iproute2 git chromium chromium-driver pocketsphinx
  pocketsphinx-testdata asterisk-core-sounds-en asterisk-core-sounds-en-g722 ffmpeg xz-utils python3 python3-venv)
# the commands checked where there is no dpkg (not Debian or Ubuntu)
COMMANDS=(espeak-ng flite festival sox mbrola cmake g++ make ip git chromium chromedriver
  pocketsphinx_mdef_convert ffmpeg xz)

check_only=0
case "${1:-}" in
  "") ;;
  --check) check_only=1 ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

if [ "${SPECBENCH_SKIP_SYSTEM_PACKAGES:-0}" = 1 ]; then
  exit 0
fi

if ! command -v dpkg-query >/dev/null 2>&1; then
  absent=()
  for cmd in "${COMMANDS[@]}"; do
    command -v "$cmd" >/dev/null 2>&1 || absent+=("$cmd")
  done
  [ ${#absent[@]} -eq 0 ] && exit 0
  echo "specbench: these commands are missing: ${absent[*]}, and this system has no dpkg to install them" \
    "with (the set-up knows Debian and Ubuntu). Fix: install them with the system's package manager (see" \
    "the package list in $0), or set SPECBENCH_SKIP_SYSTEM_PACKAGES=1 if they are provided another way." >&2
  exit 1
fi

# the packages among "$@" that are not installed (dpkg status "?i?" is installed) or are named in
# SPECBENCH_ASSUME_MISSING
missing_of() {
  local installed
  # dpkg-query exits 1 when it knows some package by no name at all (never installed, or purged): not an error
  installed=" $({ dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "$@" 2>/dev/null || true; } \
    | awk 'substr($2, 2, 1) == "i" {print $1}' | tr '\n' ' ') "
  local assumed=" ${SPECBENCH_ASSUME_MISSING:-} " pkg
  for pkg in "$@"; do
    if [[ "$installed" != *" $pkg "* || "$assumed" == *" $pkg "* ]]; then
      printf '%s\n' "$pkg"
    fi
  done
}

mapfile -t missing < <(missing_of "${SPEECH_PACKAGES[@]}" "${OTHER_PACKAGES[@]}")
[ ${#missing[@]} -eq 0 ] && exit 0
mapfile -t extra < <(missing_of "${OTHER_PACKAGES[@]}")  # the speech packages the installer installs anyway

if [ "$check_only" = 1 ]; then
  echo "specbench: missing Debian packages: ${missing[*]}"
  exit 1
fi

sudo_cmd="${SPECBENCH_SUDO:-sudo}"
install=(bash "$INSTALLER" "${extra[@]}")
if [ "$(id -u)" -eq 0 ]; then
  run=("${install[@]}")
elif command -v "$sudo_cmd" >/dev/null 2>&1 && "$sudo_cmd" -n true 2>/dev/null; then
  run=("$sudo_cmd" -n "${install[@]}")
else
  line="$(printf '%q ' "${install[@]}")"
  line="${line% }"
  if command -v "$sudo_cmd" >/dev/null 2>&1; then
    fix="sudo $line"
    why="sudo asks for a password"
  else
    fix="su root -c '$line'"
    why="there is no sudo"
  fi
  printf 'specbench: these Debian packages are missing: %s. Installing them needs root, and %s.\n' \
    "${missing[*]}" "$why" >&2
  printf 'Fix: run\n  %s\nthen run make again.\n' "$fix" >&2
  exit 1
fi

echo "specbench: installing the missing Debian packages (${missing[*]}) with: ${run[*]}" >&2
status=0
"${run[@]}" || status=$?  # apt installs nothing when it cannot find one package: say which, and the fix
mapfile -t still < <(SPECBENCH_ASSUME_MISSING="" missing_of "${SPEECH_PACKAGES[@]}" "${OTHER_PACKAGES[@]}")
if [ ${#still[@]} -ne 0 ] || [ "$status" -ne 0 ]; then
  echo "specbench: still missing after the installation: ${still[*]}. Fix: install them by hand (apt-get" \
    "install ${still[*]}); on Ubuntu chromium and chromium-driver are chromium-browser and" \
    "chromium-chromedriver." >&2
  exit 1
fi
