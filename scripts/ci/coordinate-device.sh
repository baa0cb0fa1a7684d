#!/usr/bin/env bash
# The coordinate-device lane: the reference learner's `coordinates` lane (samples/lane).
#
#   bash scripts/ci/coordinate-device.sh OUT
#
# Always builds and checks the static half; runs the physical lane only when
# ALPHA_COORDINATE_DEVICE_CONFIG names a lane config. Run it under its gate:
#   alpha observe gate coordinate-device -- bash scripts/ci/coordinate-device.sh OUT
# shellcheck source=lane-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lane-common.sh"
lane_main coordinates ALPHA_COORDINATE_DEVICE_CONFIG "${1:-}"
