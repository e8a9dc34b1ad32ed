#!/usr/bin/env bash
# Installs the speech synthesizers and voices of platform/specbench/data/voices.py on Debian or Ubuntu:
# espeak-ng, flite, festival with its HTS and ked voices, sox, and MBROLA with four English diphone voices.
# Debian keeps the mbrola program in its contrib component and the voices in non-free (Ubuntu: multiverse),
# so those components are enabled first when no apt source has them. The voices' licences allow free use for
# synthesis with MBROLA and restrict selling them; see /usr/share/doc/mbrola-*/copyright. Run as root; extra
# package names given as arguments are installed in the same apt-get call.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
. /etc/os-release

enabled() {  # is apt component $1 enabled in some one-line (.list) or deb822 (.sources) source?
  # one grep over the files, no pipe: with pipefail, cat's exit for a missing file would answer "no"
  grep -qsE "^(Components:|deb )([^#]*[[:space:]])?$1([[:space:]]|$)" /etc/apt/sources.list \
    /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources
}

case "${ID}" in
  ubuntu)
    if ! enabled multiverse; then
      case "$(dpkg --print-architecture)" in
        amd64|i386) mirror=http://archive.ubuntu.com/ubuntu ;;
        *) mirror=http://ports.ubuntu.com/ubuntu-ports ;;
      esac
      echo "deb ${mirror} ${VERSION_CODENAME} multiverse" > /etc/apt/sources.list.d/specbench-multiverse.list
    fi ;;
  debian)
    if ! enabled contrib || ! enabled non-free; then
      cat > /etc/apt/sources.list.d/specbench-contrib-non-free.sources <<SOURCES
Types: deb
URIs: http://deb.debian.org/debian
Suites: ${VERSION_CODENAME}
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
    fi ;;
  *)
    enabled non-free || enabled multiverse || echo "install-speech-packages.sh: ${ID} is neither Debian nor" \
      "Ubuntu; enable the components that carry mbrola and mbrola-us1 (Debian: contrib and non-free) first" >&2 ;;
esac

apt-get update -q
apt-get install -y -q --no-install-recommends \
  espeak-ng libespeak-ng1 flite festival festvox-us-slt-hts festvox-kdlpc16k sox \
  mbrola mbrola-us1 mbrola-us2 mbrola-us3 mbrola-en1 "$@"
