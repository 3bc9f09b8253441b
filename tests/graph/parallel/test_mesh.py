"""graph/parallel/mesh.py: ranks, groups and nodes of a device mesh; a mesh too large to plan
is refused up front (a 10^11-device mesh hung `akg parallel` in the cost model's groups)."""

import pytest

from akg.errors import ShardingError
from akg.graph.parallel.mesh import MAX_DEVICES, Mesh


def _groups_by_every_rank(mesh, axes):
    """The groups as each rank sees them, each listed once at its first rank."""
    seen, out = set(), []
    for r in range(mesh.size):
        g = mesh.group(r, axes)
        if g[0] not in seen:
            seen.add(g[0])
            out.append(g)
    return out


@pytest.mark.parametrize("text", ["dp=4", "dp=2,tp=4", "pp=2,dp=3,tp=2"])
def test_groups_are_each_ranks_group_once_in_rank_order(text):
    mesh = Mesh.parse(text)
    for axes in [[n] for n in mesh.names] + [list(mesh.names), list(mesh.names[::-1])]:
        groups = mesh.groups(axes)
        assert groups == _groups_by_every_rank(mesh, axes)
        assert sorted(r for g in groups for r in g) == list(range(mesh.size))


def test_intra_node_follows_the_node_boundaries():
    mesh = Mesh.parse("dp=2,tp=4", devices_per_node=4)
    assert mesh.intra_node(["tp"]) and not mesh.intra_node(["dp"]) and mesh.intra_node([])
    assert not Mesh.parse("dp=2,tp=4", devices_per_node=2).intra_node(["tp"])


def test_a_mesh_beyond_the_limit_is_refused():
    with pytest.raises(ShardingError, match="at most"):
        Mesh.parse("dp=99999999999")
    with pytest.raises(ShardingError, match=f"{MAX_DEVICES * 2} devices"):
        Mesh.parse(f"dp={MAX_DEVICES},tp=2")
    assert Mesh.parse("dp=65536").intra_node(["dp"]) is False  # large but allowed: groups in linear time
