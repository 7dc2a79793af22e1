"""Where a top-level column lives in an Arrow IPC record batch: its FieldNode index and
buffer index, found by walking the schema's field tree in the order the IPC format
flattens it (pre-order: each field's node and buffers, then its children's)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from gpu_profiler.frozen import frozen


@frozen
class Layout:
    """Position of one top-level column in every record batch of a schema.

    Attributes:
        node: index of the column's FieldNode.
        buffer: index of its first buffer (validity); values or list offsets follow.
        nodes: FieldNodes per record batch.
        buffers: buffers per record batch, not counting variadic (view) data buffers.
        views_before: view-typed (variadic) fields that precede the column.
        views: view-typed fields in the schema.
        dict_id: dictionary id of a dictionary-encoded column, else -1.
    """

    node: int
    buffer: int
    nodes: int
    buffers: int
    views_before: int
    views: int
    dict_id: int = -1

    def vector(self) -> np.ndarray:
        """The layout as the int64 vector the numba parsers take (``kernels.ipc_format.L_*``)."""
        return np.array([self.node, self.buffer, self.nodes, self.buffers,
                         self.views_before, self.views, self.dict_id], np.int64)


def column_layout(schema: pa.Schema, index: int, dict_id: int = -1) -> Layout:
    """Layout of top-level field ``index`` of ``schema``."""
    nodes = buffers = views = 0
    at = (0, 0, 0)
    for i, field in enumerate(schema):
        if i == index:
            at = (nodes, buffers, views)
        n, b, v = _count(field.type)
        nodes, buffers, views = nodes + n, buffers + b, views + v
    return Layout(at[0], at[1], nodes, buffers, at[2], views, dict_id)


def _count(t: pa.DataType) -> tuple[int, int, int]:
    """``(FieldNodes, buffers, view fields)`` a field of type ``t`` contributes."""
    if isinstance(t, pa.ExtensionType):
        t = t.storage_type
    if pa.types.is_dictionary(t):
        return 1, 2, 0  # the indices; the values travel in dictionary batches
    if pa.types.is_null(t):
        return 1, 0, 0
    if pa.types.is_binary_view(t) or pa.types.is_string_view(t):
        return 1, 2, 1
    if (pa.types.is_binary(t) or pa.types.is_string(t) or pa.types.is_large_binary(t)
            or pa.types.is_large_string(t)):
        return 1, 3, 0
    if pa.types.is_map(t):
        own, children = 2, [pa.struct([t.key_field, t.item_field])]
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        own, children = 2, [t.value_type]
    elif pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        own, children = 3, [t.value_type]
    elif pa.types.is_fixed_size_list(t):
        own, children = 1, [t.value_type]
    elif pa.types.is_struct(t):
        own, children = 1, [t.field(i).type for i in range(t.num_fields)]
    elif pa.types.is_union(t):
        own = 2 if t.mode == "dense" else 1  # type ids (+ offsets); no validity
        children = [t.field(i).type for i in range(t.num_fields)]
    elif pa.types.is_run_end_encoded(t):
        own, children = 0, [t.run_end_type, t.value_type]
    else:
        return 1, 2, 0  # fixed width: validity + values
    nodes, buffers, views = 1, own, 0
    for c in children:
        n, b, v = _count(c)
        nodes, buffers, views = nodes + n, buffers + b, views + v
    return nodes, buffers, views
