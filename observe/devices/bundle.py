"""The node observer's bundle: the modules it runs, zipped the same way every time, and its bootstrap.

The bundle holds the very source files the recorder runs itself
(observe.devices.health, identity, namespace, observers, observing, simulated, node_observer,
observe.env, aos.attrs: one source, never a copy) and nvidia-ml-py's pure-Python
``pynvml``, with empty package ``__init__`` files. Its bytes are deterministic
(sorted names, fixed times), so its SHA-256 names the observer's code.

:data:`BOOTSTRAP` is the program the recorder runs on the node as
``python3 -c BOOTSTRAP SHA256``: it reads a length line and that many bytes from
stdin, computes their SHA-256 and refuses to run anything unless it equals the
digest on its command line; then it imports the bundle's modules from memory (no
file is written on the node) and runs :func:`observe.devices.node_observer.main`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import zipfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BOOTSTRAP", "Bundle", "build_bundle"]

#: The bundle's modules: (name in the bundle, module whose file it is).
_MODULES = (
    ("aos/attrs.py", "aos.attrs"),
    ("observe/env.py", "observe.env"),
    ("observe/devices/health.py", "observe.devices.health"),
    ("observe/devices/identity.py", "observe.devices.identity"),
    ("observe/devices/namespace.py", "observe.devices.namespace"),
    ("observe/devices/observers.py", "observe.devices.observers"),
    ("observe/devices/observing.py", "observe.devices.observing"),
    ("observe/devices/simulated.py", "observe.devices.simulated"),
    ("observe/devices/node_observer.py", "observe.devices.node_observer"),
    ("pynvml.py", "pynvml"),
)
_PACKAGES = ("aos/__init__.py", "observe/__init__.py", "observe/devices/__init__.py")

#: Run on the node as ``python3 -c BOOTSTRAP SHA256`` (kept short: it travels in the command line).
BOOTSTRAP = """\
import sys,hashlib,io,json,zipfile,importlib.abc,importlib.util
i=sys.stdin.buffer
n=int(i.readline())
b=i.read(n)
d=hashlib.sha256(b).hexdigest()
if len(b)!=n or d!=sys.argv[1]:
 sys.stdout.write(json.dumps({"type":"refused","sha256":d,"size":len(b)})+"\\n");sys.exit(3)
z=zipfile.ZipFile(io.BytesIO(b))
S={k:z.read(k) for k in z.namelist()}
class F(importlib.abc.MetaPathFinder,importlib.abc.Loader):
 def find_spec(s,name,path=None,target=None):
  k=name.replace(".","/")
  for f,p in ((k+"/__init__.py",True),(k+".py",False)):
   if f in S:return importlib.util.spec_from_loader(name,s,origin="bundle:"+f,is_package=p)
 def create_module(s,spec):return None
 def exec_module(s,m):
  f=m.__spec__.origin[7:];m.__file__=m.__spec__.origin;exec(compile(S[f],m.__file__,"exec"),m.__dict__)
sys.meta_path.insert(0,F())
from observe.devices.node_observer import main
sys.exit(main(d))
"""


@dataclass(frozen=True)
class Bundle:
    """The bundle's bytes and their SHA-256."""

    data: bytes
    sha256: str


def _source(module: str) -> bytes:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ImportError(f"the node observer needs {module}, which cannot be found here")
    return Path(spec.origin).read_bytes()


def build_bundle() -> Bundle:
    """The bundle of this installation's modules (raises ImportError when one is missing: nvidia-ml-py)."""
    files = {name: _source(module) for name, module in _MODULES}
    files.update({name: b"" for name in _PACKAGES})
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, files[name])
    data = out.getvalue()
    return Bundle(data, hashlib.sha256(data).hexdigest())
