"""Our externalscaler.proto against the upstream contract's facts (names, types, numbers),
and the committed stubs against our .proto (regenerated here with grpcio-tools)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FieldDescriptor as F

from pipeline.serve.keda import externalscaler_pb2 as pb
from tests.support.reference import REPO, require

SCALARS = {F.TYPE_STRING: "string", F.TYPE_BOOL: "bool", F.TYPE_INT64: "int64",
           F.TYPE_DOUBLE: "double"}  # fmt: skip


def contract() -> tuple[
    str, dict[str, tuple[str, str, bool]], dict[str, dict[str, tuple[str, int]]]
]:
    text = (require("keda") / "CONTRACT.md").read_text()
    package = re.search(r"package: `(\w+)`", text)
    assert package, "CONTRACT.md names no package"
    methods = {
        m[0]: (m[1], m[3], bool(m[2]))
        for m in re.findall(r"`(\w+)\((\w+)\) returns \((stream )?(\w+)\)`", text)
    }
    messages: dict[str, dict[str, tuple[str, int]]] = {}
    current = ""
    for row in re.findall(r"^\|([^|\n]*)\|([^|\n]*)\|([^|\n]*)\|([^|\n]*)\|$", text, re.M):
        name, field, typ, number = (c.strip() for c in row)
        if not number.isdigit():
            continue  # the header and its rule
        current = name or current
        messages.setdefault(current, {})[field] = (typ, int(number))
    return package[1], methods, messages


def type_of(f: F) -> str:
    if f.message_type is not None and f.message_type.GetOptions().map_entry:
        k, v = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
        return f"map<{type_of(k)}, {type_of(v)}>"
    base = f.message_type.name if f.message_type is not None else SCALARS[f.type]
    if f.is_repeated:
        base = f"repeated {base}"
    if f.GetOptions().deprecated:
        base += " (deprecated)"
    return base


def test_package_service_and_methods_match_the_contract() -> None:
    package, methods, _ = contract()
    assert len(methods) == 5, methods
    fd = pb.DESCRIPTOR
    assert fd.package == package == "externalscaler"
    assert 'syntax = "proto3";' in (REPO / "pipeline/serve/keda/externalscaler.proto").read_text()
    service = fd.services_by_name["ExternalScaler"]
    proto = descriptor_pb2.ServiceDescriptorProto()
    service.CopyToProto(proto)
    ours = {
        m.name: (m.input_type.rsplit(".", 1)[-1], m.output_type.rsplit(".", 1)[-1],
                 m.server_streaming)
        for m in proto.method
    }  # fmt: skip
    assert ours == methods
    assert not any(m.client_streaming for m in proto.method)


def test_every_message_field_type_and_number_match_the_contract() -> None:
    _, _, messages = contract()
    assert set(messages) == {
        "ScaledObjectRef", "IsActiveResponse", "GetMetricSpecResponse", "MetricSpec",
        "GetMetricsRequest", "GetMetricsResponse", "MetricValue",
    }  # fmt: skip
    ours = {
        name: {f.name: (type_of(f), f.number) for f in msg.fields}
        for name, msg in pb.DESCRIPTOR.message_types_by_name.items()
    }
    assert ours == messages


def test_committed_stubs_are_generated_from_our_proto(tmp_path: Path) -> None:
    """The stubs are committed (docs/keda.md says why): they must be what grpcio-tools makes
    of the .proto today, or a change to one was not carried to the other."""
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{REPO}", f"--python_out={tmp_path}",
         f"--grpc_python_out={tmp_path}", "pipeline/serve/keda/externalscaler.proto"],
        check=True, cwd=REPO,
    )  # fmt: skip
    fresh = (tmp_path / "pipeline/serve/keda/externalscaler_pb2.py").read_text()
    blob = re.search(r"AddSerializedFile\((b'.*?')\)", fresh, re.S)
    assert blob
    regenerated = descriptor_pb2.FileDescriptorProto.FromString(ast.literal_eval(blob[1]))
    committed = descriptor_pb2.FileDescriptorProto()
    pb.DESCRIPTOR.CopyToProto(committed)
    assert committed == regenerated, "run `make keda-stubs` and commit the result"
    grpc_stub = (REPO / "pipeline/serve/keda/externalscaler_pb2_grpc.py").read_text()
    for method in ("IsActive", "StreamIsActive", "GetMetricSpec", "GetMetrics", "StreamMetricSpec"):
        assert f"/externalscaler.ExternalScaler/{method}" in grpc_stub
