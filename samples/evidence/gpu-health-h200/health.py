"""Print what a stream's device observations say of each GPU's health: every fact (or NVML's code) at the
start, each fact that changed after it and where, and every GPU event. Usage: ``python3 health.py STREAM``."""

import json
import sys

from aos.reader import read_stream
from observe.devices.health import FACTS

observed = [e for e in read_stream(sys.argv[1]).events if e.kind == "device.observed"]
first: dict[str, dict] = {}
for o in observed:
    for g in o.attrs["gpus"]:
        health = g.get("health")
        if health is None:
            continue
        if g["uuid"] not in first:
            first[g["uuid"]] = health
            print(f"GPU {g['index']} {g['uuid']} ({g['name']}), {o.attrs['phase']} (seq {o.seq}):")
            for fact in FACTS:
                code = health["unsupported"].get(fact)
                print(f"  {fact}: {json.dumps(health[fact]) if code is None else f'unsupported (NVML code {code})'}")
            given = len(FACTS) - len(health["unsupported"])
            print(f"  {given} of {len(FACTS)} facts given, {len(health['unsupported'])} unsupported")
            continue
        for fact in FACTS:
            value = health[fact]
            if value != first[g["uuid"]][fact]:
                print(f"  seq {o.seq} ({o.attrs['phase']}): GPU {g['index']} {fact} {json.dumps(value)}")
    for e in o.attrs.get("gpu_events") or []:
        print(f"  seq {o.seq}: GPU event {json.dumps(e)}")
print(f"{len(observed)} observations ({', '.join(o.attrs['phase'] for o in observed)})")
