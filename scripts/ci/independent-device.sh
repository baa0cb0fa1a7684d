#!/usr/bin/env bash
# The independent-device lane: the reference learner's `independent` lane (samples/lane).
#
#   bash scripts/ci/independent-device.sh OUT
#
# Always builds and checks the static half; runs the physical lane only when
# ALPHA_INDEPENDENT_DEVICE_CONFIG names a lane config. Run it under its gate:
#   alpha observe gate independent-device -- bash scripts/ci/independent-device.sh OUT
# shellcheck source=lane-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lane-common.sh"
lane_main independent ALPHA_INDEPENDENT_DEVICE_CONFIG "${1:-}"
