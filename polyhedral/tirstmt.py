"""Small helpers over TIR statements that the generator builds and then edits (the Python
bindings of this TVM have no statement visitor or mutator): flattening sequences, walking
loops, finding allocations, replacing one statement."""

from __future__ import annotations

from tvm import tirx


def seq(stmts: list) -> tirx.Stmt:
    """One statement for `stmts` (None entries dropped, nested sequences flattened)."""
    flat = []
    for s in stmts:
        if isinstance(s, tirx.SeqStmt):
            flat.extend(s.seq)
        elif s is not None:
            flat.append(s)
    if not flat:
        return tirx.Evaluate(0)
    return flat[0] if len(flat) == 1 else tirx.SeqStmt(flat)


def substatements(stmt: tirx.Stmt) -> list[tirx.Stmt]:
    if isinstance(stmt, tirx.SeqStmt):
        return list(stmt.seq)
    if isinstance(stmt, tirx.IfThenElse):
        return [stmt.then_case] + ([stmt.else_case] if stmt.else_case is not None else [])
    body = getattr(stmt, "body", None)
    return [body] if isinstance(body, tirx.Stmt) else []


def loops(stmt: tirx.Stmt) -> list[tirx.For]:
    """Every For in `stmt`, outer ones first."""
    out = [stmt] if isinstance(stmt, tirx.For) else []
    for sub in substatements(stmt):
        out.extend(loops(sub))
    return out


def allocates(stmt: tirx.Stmt) -> bool:
    """Whether `stmt` allocates a buffer anywhere inside it."""
    return isinstance(stmt, tirx.AllocBuffer) or any(allocates(sub) for sub in substatements(stmt))


def buffers(stmt: tirx.Stmt, kind=tirx.BufferStore) -> set[tirx.Buffer]:
    """The buffers that the statements of `kind` inside `stmt` name: those it stores into
    (`tirx.BufferStore`) or allocates (`tirx.AllocBuffer`)."""
    own = {stmt.buffer} if isinstance(stmt, kind) else set()
    return own.union(*(buffers(sub, kind) for sub in substatements(stmt)))


def replace(stmt: tirx.Stmt, old: tirx.Stmt, new: tirx.Stmt) -> tirx.Stmt:
    """`stmt` with its substatement `old` (the same object) replaced by `new`."""
    if stmt.same_as(old):
        return new
    if isinstance(stmt, tirx.SeqStmt):
        return tirx.SeqStmt([replace(s, old, new) for s in stmt.seq])
    if isinstance(stmt, tirx.For):
        return tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, replace(stmt.body, old, new),
                        stmt.thread_binding, stmt.annotations)
    if isinstance(stmt, tirx.IfThenElse):
        return tirx.IfThenElse(stmt.condition, replace(stmt.then_case, old, new),
                               None if stmt.else_case is None else replace(stmt.else_case, old, new))
    if isinstance(stmt, tirx.AttrStmt):
        return tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value, replace(stmt.body, old, new))
    return stmt
