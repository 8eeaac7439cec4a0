#!/bin/sh
# A Debian 12 base image made from Debian's own packages, for building connmon's image where
# no registry serves one: mmdebstrap writes a minimal root file system as a tar (Essential and
# required packages plus apt; the mirror's bookworm, bookworm-updates and security suites, whose
# sources stay in the image for the Containerfile's apt-get), podman imports it.
#
#   sh deploy/container/make-base.sh [TAG]      # default localhost/connmon-base/debian:bookworm
#
# Needs root, mmdebstrap and podman (Debian: apt-get install mmdebstrap podman).
set -eu
tag=${1:-localhost/connmon-base/debian:bookworm}
mmdebstrap --variant=minbase --format=tar \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --aptopt='Acquire::Languages "none"' \
    bookworm - \
  | podman import --change 'CMD ["bash"]' - "$tag"
