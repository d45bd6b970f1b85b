"""Reading a build's compile_commands.json for the checks in this folder."""
import json
import os
import shlex


def load(build_dir, source_dir):
    """(path relative to source_dir, entry) for every unit of the build."""
    with open(os.path.join(build_dir, "compile_commands.json")) as f:
        entries = json.load(f)
    source_dir = os.path.realpath(source_dir)
    return [(os.path.relpath(os.path.realpath(os.path.join(e["directory"], e["file"])), source_dir), e)
            for e in entries]


def without_outputs(entry):
    """The unit's compile command without -c, its object file and its dependency-file flags, so that
    a check can rerun the compiler with other flags and write nothing of the build's."""
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    stripped = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if arg in ("-MD", "-MMD", "-c"):
            continue
        stripped.append(arg)
    return stripped
