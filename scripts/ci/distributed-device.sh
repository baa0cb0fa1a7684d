#!/usr/bin/env bash
# The distributed-device lane: the reference learner's `partitioned` lane (samples/lane).
#
#   bash scripts/ci/distributed-device.sh OUT
#
# Always builds and checks the static half; runs the physical lane only when
# ALPHA_PARTITIONED_DEVICE_CONFIG names a lane config. Run it under its gate:
#   alpha observe gate distributed-device -- bash scripts/ci/distributed-device.sh OUT
# shellcheck source=lane-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lane-common.sh"
lane_main partitioned ALPHA_PARTITIONED_DEVICE_CONFIG "${1:-}"
