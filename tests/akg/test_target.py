"""akg.target: targets found as plug-ins by name, capabilities and memory levels as data,
artifacts by kind."""

import numpy as np
import pytest

from akg.errors import ScheduleError, UnknownTargetError
from akg.target import (BACKENDS, TARGETS, VECTOR, Artifact, MemoryLevel, get_backend, get_target,
                        load_plugins)


def test_plugins_register_the_cpu_targets_and_backend():
    load_plugins()
    assert {"cpu", "llvm", "cpu-generic"} <= set(TARGETS)
    cpu = get_target("cpu")
    assert get_target(cpu) is cpu and get_target("CPU") == cpu
    assert cpu.backend() is get_backend(cpu.backend().artifact_kind)
    assert cpu.backend().artifact_kind in BACKENDS


def test_unknown_names_list_the_known():
    with pytest.raises(UnknownTargetError, match="unknown target 'tpu9'.*cpu-generic.*llvm"):
        get_target("tpu9")
    with pytest.raises(Exception, match="no backend for artifacts of kind for 'nope'"):
        get_backend("nope")


def test_capabilities_and_levels_are_data():
    generic = get_target("cpu-generic")
    assert generic.has(VECTOR) and generic.key == "cpu-generic-128b-2c"
    assert [m.name for m in generic.memory] == ["global", "L2", "L1", "registers"]
    assert generic.level("L1") == MemoryLevel("L1", 32 * 1024, 64, "core")
    with pytest.raises(ScheduleError, match="no memory level 'UB'.*global, L2, L1, registers"):
        generic.level("UB")
    with pytest.raises(ScheduleError, match="needs capability 'threads', which target 'cpu-generic-128b-2c' lacks"):
        generic.require("threads", "map(threads)")


def test_an_artifact_round_trips_through_its_backend():
    import akg
    from akg.graph import GraphBuilder

    b = GraphBuilder("t")
    b.output(b.exp(b.input("x", (4, 8))))
    kernel = akg.build(b.build(), target="cpu-generic")
    backend = kernel.target.backend()
    artifact = backend.export(kernel.executable)
    assert isinstance(artifact, Artifact) and artifact.kind == backend.artifact_kind and len(artifact.data) > 1000
    loaded = get_backend(artifact.kind).load(artifact)
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
    (out,) = backend.run(loaded, [x], [((4, 8), "float32")])
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-6)
    assert backend.measure(loaded, [backend.to_device(x), backend.empty((4, 8), "float32")], number=2, repeat=3)
