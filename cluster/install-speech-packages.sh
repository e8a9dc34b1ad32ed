#!/usr/bin/env bash
# Installs the speech synthesizers and voices of platform/specbench/data/voices.py on Debian or Ubuntu:
# espeak-ng, flite, festival with its HTS and ked voices, sox, and MBROLA with four English diphone voices.
# The MBROLA voices live in Debian's non-free component (Ubuntu's multiverse), so that component is enabled
# first. Their licence allows free use for synthesis with MBROLA and forbids selling them; see
# /usr/share/doc/mbrola-us1/copyright. Run as root; extra package names given as arguments are installed too.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
. /etc/os-release
if [ "${ID}" = "ubuntu" ]; then
  if ! grep -rqs "multiverse" /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "deb http://archive.ubuntu.com/ubuntu ${VERSION_CODENAME} multiverse" \
      > /etc/apt/sources.list.d/specbench-multiverse.list
  fi
else
  if ! grep -rqsE "^(Components:.*non-free( |$)|deb .* non-free( |$))" /etc/apt/sources.list /etc/apt/sources.list.d/; then
    cat > /etc/apt/sources.list.d/specbench-non-free.sources <<SOURCES
Types: deb
URIs: http://deb.debian.org/debian
Suites: ${VERSION_CODENAME}
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
  fi
fi
apt-get update -q
apt-get install -y -q --no-install-recommends \
  espeak-ng libespeak-ng1 flite festival festvox-us-slt-hts festvox-kdlpc16k sox \
  mbrola mbrola-us1 mbrola-us2 mbrola-us3 mbrola-en1 "$@"
