"""Builds the llamafleet package: its sources plus the llamafleet.v1 stubs, generated from
the repository's api/llamafleet/v1/*.proto (or $LLAMAFLEET_PROTO_DIR) while building.

    pip install --no-build-isolation clients/python    # offline: uses the installed setuptools

Needs protoc and grpc_python_plugin (Debian: protobuf-compiler, protobuf-compiler-grpc) or
grpc_tools on the build machine; at run time grpcio, protobuf and PyYAML.
"""

import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import generate_stubs  # noqa: E402  (beside this file)


class BuildWithStubs(build_py):
    """build_py that also writes llamafleet/v1 into the build directory."""

    def run(self):
        super().run()
        proto_dir = os.environ.get("LLAMAFLEET_PROTO_DIR") or os.path.join(HERE, "..", "..", "api")
        try:
            generate_stubs.generate(proto_dir, self.build_lib)
        except generate_stubs.StubError as e:
            sys.exit("llamafleet: %s" % e)


setup(cmdclass={"build_py": BuildWithStubs})
