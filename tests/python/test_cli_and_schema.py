"""`python -m fuselage export-torchvision` and the generated protobuf module."""

import hashlib
import os
import subprocess
import sys

import torch
import torchvision

import fuselage
from conftest import REPO
from fuselage import _proto


def test_export_torchvision_writes_the_seeded_model(tmp_path):
    path = str(tmp_path / "resnet18.fsl")
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    result = subprocess.run(
        [sys.executable, "-m", "fuselage", "export-torchvision", "resnet18", path,
         "--input-size", "1", "3", "32", "32", "--seed", "7"],
        capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    torch.manual_seed(7)
    want = torchvision.models.resnet18(weights=None).eval()
    got = fuselage.to_torch(path)
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(got(x), want(x))


def test_export_torchvision_unknown_model_fails_clearly(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    result = subprocess.run(
        [sys.executable, "-m", "fuselage", "export-torchvision", "resnet_nope",
         str(tmp_path / "x.fsl")], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 2
    assert "torchvision.models has no model 'resnet_nope'" in result.stderr
    assert not (tmp_path / "x.fsl").exists()


def test_python_schema_is_generated_from_graph_model_proto():
    pb = _proto.model_pb2()
    source = os.path.join(REPO, "graph", "model.proto")
    with open(pb.__file__, encoding="utf-8") as f:
        first_line = f.readline()
    assert first_line.strip().endswith(hashlib.sha256(open(source, "rb").read()).hexdigest())
    assert pb.DESCRIPTOR.package == "fuselage.proto"
    # Enum values mirror graph/dtype.h and graph/node.h.
    assert (pb.FLOAT32, pb.QINT8, pb.QUINT8, pb.BOOL, pb.FLOAT16) == (1, 6, 7, 9, 10)
    assert (pb.PLACEHOLDER, pb.CALL_MODULE, pb.OUTPUT) == (1, 4, 6)


def test_changed_schema_is_regenerated(tmp_path):
    # A changed .proto (here: a copy with one more field) gets a newly generated module.
    changed = tmp_path / "model.proto"
    text = open(os.path.join(REPO, "graph", "model.proto"), encoding="utf-8").read()
    changed.write_text(text.replace("  Module root = 4;", "  Module root = 4;\n  string note = 99;"))
    cache = tmp_path / "cache"
    # A module generated from the old schema is there already: it is stale and replaced.
    (cache / "proto").mkdir(parents=True)
    stale = open(_proto.model_pb2().__file__, encoding="utf-8").read()
    (cache / "proto" / "model_pb2.py").write_text(stale)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from fuselage import _proto; "
            "pb = _proto.model_pb2(); print(pb.__file__); print('note' in pb.Model.DESCRIPTOR.fields_by_name)")
    # With FUSELAGE_PROTO set, the module goes to the cache folder, never the package's.
    env = dict(os.environ, FUSELAGE_PROTO=str(changed), FUSELAGE_CACHE_DIR=str(cache))
    result = subprocess.run([sys.executable, "-c", code, os.path.join(REPO, "python")],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    path, has_note = result.stdout.split()
    assert has_note == "True"
    assert path == str(cache / "proto" / "model_pb2.py")
