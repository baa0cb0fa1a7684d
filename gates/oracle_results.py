"""The reference lane's oracle results, as bytes: what a right device lane publishes (samples/lane/oracle.py).

``gates.testing.device_lane`` captures these as its checkpoints and trajectories,
so its synthetic streams meet the device gates' pinned digests.
``tests/samples/test_oracle_pins.py`` recomputes every one from the oracle
and fails on any difference.
"""

from __future__ import annotations

__all__ = ["ORACLE_CHECKPOINT", "ORACLE_TRAJECTORY"]

#: The checkpoint after 5 updates, by device gate.
ORACLE_CHECKPOINT: dict[str, bytes] = {
    "distributed-device": (
        b'{"chunks":[{"name":"momentum","sha256":"c296c9d3f9983239af5f4ad97619ceb8f641a2896faffd47'
        b'6ce11c034c5c85aa","values":["-0x1.dcc6f45da824cp-1","-0x1.8fd6df7de796ep+2"]},{"name":"p'
        b'aram","sha256":"e72326612b6120602ab8792baeb999b357266bff19f12f0e19608c147e276d30","value'
        b's":["0x1.ca76fff1e7162p-3","0x1.486d4f41b9ed0p+0"]}],"format":"alpha-lane-checkpoint/1",'
        b'"lane":"partitioned","learner":"eb9d51be3eace297ff242be520d7b0abe3f92faa6b3e49c345e51625'
        b'1f3241ff","step":5}\n'
    ),
    "coordinate-device": (
        b'{"chunks":[{"name":"momentum","sha256":"c296c9d3f9983239af5f4ad97619ceb8f641a2896faffd47'
        b'6ce11c034c5c85aa","values":["-0x1.dcc6f45da824cp-1","-0x1.8fd6df7de796ep+2"]},{"name":"p'
        b'aram","sha256":"e72326612b6120602ab8792baeb999b357266bff19f12f0e19608c147e276d30","value'
        b's":["0x1.ca76fff1e7162p-3","0x1.486d4f41b9ed0p+0"]}],"format":"alpha-lane-checkpoint/1",'
        b'"lane":"coordinates","learner":"d49f173041d8993bc078bd60be85ac591bb24d41556152cb7b70a53e'
        b'776066b7","step":5}\n'
    ),
    "independent-device": (
        b'{"chunks":[{"name":"state","sha256":"cac71f9e8d3bfd947ad3db0608edaa2b6ab757b3722d25634b9'
        b'27991caf42503","values":["0x1.0c649906cca2dp+2","-0x1.65db76b3bb83dp-2"]},{"name":"veloc'
        b'ity","sha256":"52b8b62927630c68a90e8669baa477b2bbc497f39e12466f14cec33eac367e48","values'
        b'":["0x1.8d64d7f0ed3dcp-3","-0x1.08ede54b48d3fp-6"]}],"format":"alpha-lane-checkpoint/1",'
        b'"lane":"independent","learner":"a376bfe85530fe5b12436c1104f2987955fe3c65cc9687d729bebb58'
        b'69bb4df3","step":5}\n'
    ),
}
#: The trajectory of updates 1 to 5, by device gate.
ORACLE_TRAJECTORY: dict[str, bytes] = {
    "distributed-device": (
        b'{"format":"alpha-lane-trajectory/1","lane":"partitioned","learner":"eb9d51be3eace297ff24'
        b'2be520d7b0abe3f92faa6b3e49c345e516251f3241ff","rows":[{"chunks":{"momentum":["-0x1.00000'
        b'00000000p-1","-0x1.4555555555555p+1"],"param":["0x1.999999999999ap-6","0x1.0444444444444'
        b'p-3"]},"step":1},{"chunks":{"momentum":["-0x1.bfbbbbbbbbbbcp-1","-0x1.238d82d82d82ep+2"]'
        b',"param":["0x1.197e4b17e4b18p-4","0x1.6b602468acf14p-2"]},"step":2},{"chunks":{"momentum'
        b'":["-0x1.13fb0eca86420p+0","-0x1.782d4a252adb4p+2"],"param":["0x1.f64723b9e9b32p-4","0x1'
        b'.4c2896433469fp-1"]},"step":3},{"chunks":{"momentum":["-0x1.17ed190589850p+0","-0x1.9be6'
        b'3522b7016p+2"],"param":["0x1.6b1c024592420p-3","0x1.f0eb11eab0d0ep-1"]},"step":4},{"chun'
        b'ks":{"momentum":["-0x1.dcc6f45da824cp-1","-0x1.8fd6df7de796ep+2"],"param":["0x1.ca76fff1'
        b'e7162p-3","0x1.486d4f41b9ed0p+0"]},"step":5}]}\n'
    ),
    "coordinate-device": (
        b'{"format":"alpha-lane-trajectory/1","lane":"coordinates","learner":"d49f173041d8993bc078'
        b'bd60be85ac591bb24d41556152cb7b70a53e776066b7","rows":[{"chunks":{"momentum":["-0x1.00000'
        b'00000000p-1","-0x1.4555555555555p+1"],"param":["0x1.999999999999ap-6","0x1.0444444444444'
        b'p-3"]},"step":1},{"chunks":{"momentum":["-0x1.bfbbbbbbbbbbcp-1","-0x1.238d82d82d82ep+2"]'
        b',"param":["0x1.197e4b17e4b18p-4","0x1.6b602468acf14p-2"]},"step":2},{"chunks":{"momentum'
        b'":["-0x1.13fb0eca86420p+0","-0x1.782d4a252adb4p+2"],"param":["0x1.f64723b9e9b32p-4","0x1'
        b'.4c2896433469fp-1"]},"step":3},{"chunks":{"momentum":["-0x1.17ed190589850p+0","-0x1.9be6'
        b'3522b7016p+2"],"param":["0x1.6b1c024592420p-3","0x1.f0eb11eab0d0ep-1"]},"step":4},{"chun'
        b'ks":{"momentum":["-0x1.dcc6f45da824cp-1","-0x1.8fd6df7de796ep+2"],"param":["0x1.ca76fff1'
        b'e7162p-3","0x1.486d4f41b9ed0p+0"]},"step":5}]}\n'
    ),
    "independent-device": (
        b'{"format":"alpha-lane-trajectory/1","lane":"independent","learner":"a376bfe85530fe5b1243'
        b'6c1104f2987955fe3c65cc9687d729bebb5869bb4df3","rows":[{"chunks":{"state":["0x1.ccccccccc'
        b'ccccp-1","-0x1.3333333333333p-4"],"velocity":["0x1.cccccccccccccp-1","-0x1.3333333333333'
        b'p-4"]},"step":1},{"chunks":{"state":["0x1.147ae147ae147p+1","-0x1.70a3d70a3d70ap-3"],"ve'
        b'locity":["0x1.428f5c28f5c28p+0","-0x1.ae147ae147ae1p-4"]},"step":2},{"chunks":{"state":['
        b'"0x1.a5a1cac083126p+1","-0x1.1916872b020c4p-2"],"velocity":["0x1.224dd2f1a9fbep+0","-0x1'
        b'.83126e978d4fep-4"]},"step":3},{"chunks":{"state":["0x1.fff2e48e8a71dp+1","-0x1.554c985f'
        b'06f69p-2"],"velocity":["0x1.694467381d7dcp-1","-0x1.e1b089a027527p-5"]},"step":4},{"chun'
        b'ks":{"state":["0x1.0c649906cca2dp+2","-0x1.65db76b3bb83dp-2"],"velocity":["0x1.8d64d7f0e'
        b'd3dcp-3","-0x1.08ede54b48d3fp-6"]},"step":5}]}\n'
    ),
}
