#!/usr/bin/env python3
"""graphserve's .proto files against the ones Triton's own client was built from: every message,
field, enum value and method that graphserve declares must be Triton's (same full name, number, type,
label, streaming), so that a Triton client decodes graphserve's answers and graphserve decodes its
requests. graphserve's own settings are fields numbered from 1000, which Triton does not use, so its
clients skip them; the messages and enums of those fields alone (buckets, precision, ...) are
graphserve's own and must not be reachable through any of Triton's fields. Every method of Triton's
GRPCInferenceService must be declared.

Needs PROTOC and PROTO_DIR in the environment (ctest sets them).
"""
import os
import pathlib
import subprocess
import tempfile
import unittest

import server_fixture  # noqa: F401  (exits 77 without tritonclient)
from google.protobuf import descriptor_pb2
from tritonclient.grpc import model_config_pb2, service_pb2

FIRST_EXTENSION_NUMBER = 1000


def ours():
    """Our files, compiled by protoc into a FileDescriptorSet."""
    proto_dir = pathlib.Path(os.environ["PROTO_DIR"])
    with tempfile.TemporaryDirectory() as scratch:
        out = pathlib.Path(scratch) / "set.pb"
        files = sorted(str(p.name) for p in proto_dir.glob("*.proto"))
        subprocess.run([os.environ["PROTOC"], f"-I{proto_dir}", f"--descriptor_set_out={out}", *files],
                       check=True)
        descriptor_set = descriptor_pb2.FileDescriptorSet()
        descriptor_set.ParseFromString(out.read_bytes())
    return descriptor_set.file


def triton_messages():
    """Full name → descriptor of every message and enum in Triton's client protos."""
    found = {}

    def walk(container):
        for message in container.message_types_by_name.values() if hasattr(container, "message_types_by_name") \
                else container.nested_types:
            found[message.full_name] = message
            walk(message)
        for enum in container.enum_types_by_name.values():
            found[enum.full_name] = enum

    for module in (service_pb2, model_config_pb2):
        walk(module.DESCRIPTOR)
    return found


class WireCompatibilityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.files = ours()
        cls.triton = triton_messages()

    def each_message(self):
        def walk(prefix, messages):
            for message in messages:
                name = f"{prefix}.{message.name}"
                yield name, message
                yield from walk(name, message.nested_type)

        for file in self.files:
            yield from walk(file.package, file.message_type)

    def own_types(self):
        """Full names of the messages and enums only graphserve's fields (numbered from 1000) use,
        directly or through each other; checked to be used by none of Triton's fields."""
        messages = dict(self.each_message())
        own, pending = set(), []
        for name, message in messages.items():
            for field in message.field:
                if field.number >= FIRST_EXTENSION_NUMBER and field.type_name:
                    pending.append(field.type_name.lstrip("."))
        while pending:
            name = pending.pop()
            if name in own or name in self.triton:
                continue
            own.add(name)
            for field in messages[name].field if name in messages else []:
                if field.type_name:
                    pending.append(field.type_name.lstrip("."))
        for name, message in messages.items():
            if name in own:
                continue
            for field in message.field:
                self.assertFalse(field.number < FIRST_EXTENSION_NUMBER and field.type_name.lstrip(".") in own,
                                 f"{name}.{field.name}: a Triton field of graphserve's own type")
        return own

    def each_enum(self):
        for file in self.files:
            for enum in file.enum_type:
                yield f"{file.package}.{enum.name}", enum
        for name, message in self.each_message():
            for enum in message.enum_type:
                yield f"{name}.{enum.name}", enum

    def test_every_message_field_is_tritons(self):
        checked = 0
        own = self.own_types()
        for name, message in self.each_message():
            if message.options.map_entry or name in own:
                continue
            self.assertTrue(name in self.triton, f"message {name} is not Triton's")
            theirs = {field.number: field for field in self.triton[name].fields}
            for field in message.field:
                where = f"{name}.{field.name} = {field.number}"
                if field.number >= FIRST_EXTENSION_NUMBER:
                    self.assertFalse(field.number in theirs, f"{where}: Triton uses this number")
                    continue
                self.assertTrue(field.number in theirs, f"{where}: Triton has no field with this number")
                triton_field = theirs[field.number]
                self.assertEqual(field.name, triton_field.name, where)
                self.assertEqual(field.type, triton_field.type, f"{where}: type")
                self.assertEqual(field.label, triton_field.label, f"{where}: label")
                if field.type_name:
                    expected = (triton_field.message_type or triton_field.enum_type).full_name
                    self.assertEqual(field.type_name.lstrip("."), expected, f"{where}: type name")
                checked += 1
        self.assertGreater(checked, 100)

    def test_every_enum_value_is_tritons(self):
        own = self.own_types()
        for name, enum in self.each_enum():
            if name in own:
                continue
            self.assertTrue(name in self.triton, f"enum {name} is not Triton's")
            theirs = {value.name: value.number for value in self.triton[name].values}
            for value in enum.value:
                self.assertEqual(theirs.get(value.name), value.number, f"{name}.{value.name}")

    def test_every_triton_method_is_declared_alike(self):
        service = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
        declared = {}
        for file in self.files:
            for ours_service in file.service:
                if f"{file.package}.{ours_service.name}" == service.full_name:
                    declared = {method.name: method for method in ours_service.method}
        self.assertEqual(sorted(declared), sorted(service.methods_by_name))
        for method in service.methods:
            mine = declared[method.name]
            self.assertEqual(mine.input_type.lstrip("."), method.input_type.full_name, method.name)
            self.assertEqual(mine.output_type.lstrip("."), method.output_type.full_name, method.name)
            self.assertEqual(mine.client_streaming, method.client_streaming, method.name)
            self.assertEqual(mine.server_streaming, method.server_streaming, method.name)


if __name__ == "__main__":
    unittest.main()
